/**
 * The `--handlers` module of the sidecar bench: a no-op handler for every event type. At the
 * events counted in PHE_BENCH_MARKS (e.g. `3000,30000`) it writes its process's CPU time and the
 * clock to stderr as `PHE_BENCH_MARK {"count":…,"cpuUs":…,"atMs":…}`, for bench/sidecar.ts.
 */
import type { Consumer } from '../src/consumer/consumer.js';

const marks = (process.env.PHE_BENCH_MARKS ?? '').split(',').filter(Boolean).map(Number);
let count = 0;

export default function register(consumer: Consumer): void {
  const handler = () => {
    count++;
    if (count !== marks[0]) return;
    marks.shift();
    const cpu = process.cpuUsage();
    const atMs = performance.timeOrigin + performance.now();
    process.stderr.write(`PHE_BENCH_MARK ${JSON.stringify({ count, cpuUs: cpu.user + cpu.system, atMs })}\n`);
  };
  consumer.on('*', handler).onUnknown(handler);
}
