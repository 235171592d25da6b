# The sidecar image: `partner-events run`, configured by a file and PARTNER_EVENTS_* variables.
# Build: docker build -t partner-health-events .   (not built in this repository's CI: no Docker engine there;
# test/dockerfile.test.ts checks its peers, entry point and Node against the tree instead)
# Node: the active LTS, the version CI runs the suite on besides 20 (docs/deployment.md: how to bump it).
FROM node:24-slim AS build
WORKDIR /app
COPY package.json package-lock.json ./
# No install scripts: nothing here needs one (esbuild and better-sqlite3 13 come as prebuilt
# packages), and no dependency's script should run in the build. (`npm install` when a registry
# mirror left other platforms' optional binaries out of the lock and `npm ci` refuses it.)
# Nothing is compiled: better-sqlite3 13, which the kit loads on Node >= 22, ships prebuilt binaries;
# better-sqlite3 12, an optional dependency for Node 20 only, is not built here nor installed below.
RUN npm ci --no-audit --no-fund --ignore-scripts || npm install --no-audit --no-fund --ignore-scripts
COPY . .
# Build, then install the runtime set afresh: the production dependencies plus the optional peers
# every source, the Redis store and trace export (OTEL_EXPORTER_OTLP_ENDPOINT) need (they are
# dev-only in this repository's package.json).
RUN npm run build \
  && npm pkg delete devDependencies peerDependencies peerDependenciesMeta scripts.pretest \
  && rm -rf node_modules \
  && npm install --omit=dev --omit=optional --no-audit --no-fund \
     ioredis@^6 @aws-sdk/client-sqs@^3 @azure/storage-queue@~12.30.0 @azure/identity@~4.12.0 \
     @azure/event-hubs@6.0.0 @azure/eventhubs-checkpointstore-blob@2.0.0 @azure/storage-blob@~12.30.0 \
     @opentelemetry/api@^1.9.1 @opentelemetry/sdk-trace-base@~2.12.1 @opentelemetry/resources@~2.12.1 \
     @opentelemetry/exporter-trace-otlp-http@^0.223.1

FROM node:24-slim
ENV NODE_ENV=production
WORKDIR /app
COPY --from=build /app/package.json ./
COPY --from=build /app/node_modules ./node_modules
COPY --from=build /app/dist ./dist
# State (the default dedupe database and dead letters) lives in the working directory: mount a
# volume there. Settings come from the config file and the environment, not from the image.
RUN mkdir -p /var/lib/partner-events && chown 1000:1000 /var/lib/partner-events
WORKDIR /var/lib/partner-events
# Numeric, so Kubernetes' runAsNonRoot can verify it (uid 1000 is the image's `node` user).
USER 1000
EXPOSE 9464
ENTRYPOINT ["node", "/app/dist/cli/main.js"]
CMD ["run"]
