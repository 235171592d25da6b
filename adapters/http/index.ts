/**
 * HTTP ingress, for partners who relay events over HTTP:
 * `import { createHttpIngress } from 'partner-health-events/http'`; the CLI's `http://HOST:PORT/PATH`.
 */
export { createHttpIngress, type HttpIngressSource, type HttpMessage } from './adapter.js';
export type { HttpIngressOptions } from './options.js';
