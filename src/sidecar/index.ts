/**
 * `partner-health-events/sidecar`: what `partner-events run` adds to the library, for those who
 * embed the sidecar's pieces in their own process: its config (one schema for file, environment
 * and flags), the forwarder to the partner's app, the ops server and its readiness checks, and
 * Prometheus metrics. Loads prom-client and yaml, which the root entry never does.
 */
export {
  configFromEnv,
  configFromFile,
  envName,
  resolveSidecarConfig,
  type SidecarConfig,
  type SidecarConfigInput,
  sidecarConfigSchema,
} from './config.js';
export { createForwarder, type ForwardOptions } from './forward.js';
export { ConsumerMetrics } from './metrics.js';
export { type OpsServer, type OpsServerOptions, type ReadinessCheck, startOpsServer } from './ops-server.js';
export { type Readiness, readiness } from './readiness.js';
