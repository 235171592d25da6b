/**
 * Runs `azurite-queue` (same arguments) with its extent garbage collector's sweep turned off.
 *
 * Azurite 3.35 sweeps the extents of deleted messages every 60 s, deleting them one by one from a
 * LokiJS collection that rebuilds its index on every removal, without yielding: after a few
 * thousand deleted messages the sweep blocks the emulator for minutes and every request hangs
 * (seen in the crash suite: 100 % CPU in `deleteExtents` → `Collection.ensureIndex`). With the
 * sweep off, nothing else changes; deleted messages' bytes are simply not reclaimed.
 */
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);
const { default: QueueGCManager } = require('azurite/dist/src/queue/gc/QueueGCManager.js');
QueueGCManager.prototype.markSweep = async function markSweep() {};
require('azurite/dist/src/queue/main.js');
