# The sidecar image: `partner-events run`, configured by a file and PARTNER_EVENTS_* variables.
# Build: docker build -t partner-health-events .   (not built in this repository's CI: no Docker engine there)
FROM node:20-slim AS build
WORKDIR /app
RUN apt-get update && apt-get install -y --no-install-recommends python3 make g++ \
  && rm -rf /var/lib/apt/lists/*
COPY package.json package-lock.json ./
RUN npm ci --no-audit --no-fund
COPY . .
RUN npm run build && npm prune --omit=dev

FROM node:20-slim
ENV NODE_ENV=production
WORKDIR /app
COPY --from=build /app/package.json ./
COPY --from=build /app/node_modules ./node_modules
COPY --from=build /app/dist ./dist
# The dedupe database and dead letters live on a volume owned by the unprivileged user.
RUN mkdir -p /var/lib/partner-events && chown node:node /var/lib/partner-events
USER node
ENV PARTNER_EVENTS_DEDUPE=sqlite:/var/lib/partner-events/dedupe.db \
    PARTNER_EVENTS_DEAD_LETTER=/var/lib/partner-events/dead-letters.jsonl \
    PARTNER_EVENTS_OPS_HOST=0.0.0.0
EXPOSE 9464
ENTRYPOINT ["node", "dist/cli/main.js"]
CMD ["run"]
