import type { ServerResponse } from 'node:http';

/**
 * The console's open server-sent-event streams. A stream never ends by itself (the page reads it
 * until it goes away), and `server.close()` waits for every connection to end: without
 * `endAll()`, one open console page would keep a stopping worker alive until it is killed.
 */
export class EventStreams {
  readonly #open = new Set<ServerResponse>();
  #ended = false;

  /**
   * Answers `res` with a stream of `next()`, sent now and then every `everyMs`, until the client
   * goes away or `endAll()`. Once ended, a new stream is refused (503): it would hold the close.
   */
  open(
    res: ServerResponse,
    headers: Readonly<Record<string, string>>,
    next: () => string,
    everyMs: number,
  ): void {
    if (this.#ended) {
      res.writeHead(503, { ...headers, 'content-type': 'text/plain', connection: 'close' }).end('stopping\n');
      return;
    }
    res.writeHead(200, { ...headers, 'content-type': 'text/event-stream', connection: 'keep-alive' });
    const push = () => res.write(`data: ${next()}\n\n`);
    push();
    const timer = setInterval(push, everyMs);
    timer.unref();
    this.#open.add(res);
    // 'close' of the answer: the client went away, or endAll() ended it.
    res.once('close', () => {
      clearInterval(timer);
      this.#open.delete(res);
    });
  }

  /** Ends every open stream (each client sees its end), and refuses those asked for later. */
  endAll(): void {
    this.#ended = true;
    for (const res of this.#open) res.end();
  }
}
