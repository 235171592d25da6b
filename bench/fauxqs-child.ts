/**
 * The child of `startFauxqsChild` (bench/fauxqs.ts): fauxqs on a loopback port, its endpoint sent
 * to the parent, until the parent disconnects.
 */
import { startFauxqs } from '../test/support/fauxqs.js';

const server = await startFauxqs();
process.send?.({ endpoint: server.endpoint });
process.once('disconnect', () => void server.close());
