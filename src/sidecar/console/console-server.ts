import { createHash, timingSafeEqual } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Keyring } from '../../core/secrets.js';
import type { ReadinessCheck } from '../ops-server.js';
import { CONSOLE_CSS, CONSOLE_HTML, CONSOLE_JS } from './assets.js';
import { DeadLetterIndex, type LetterFilter } from './dead-letter-index.js';
import { EventStreams } from './event-streams.js';
import { letterDetail, recordBytes } from './letter-detail.js';
import type { LiveStats } from './live-stats.js';
import type { ReplayJobs } from './replay-jobs.js';

/** The environment variable holding the token that replays from the console need. */
export const CONSOLE_TOKEN_ENV = 'PARTNER_EVENTS_CONSOLE_TOKEN';

export interface ConsoleOptions {
  readonly stats: LiveStats;
  readonly deadLetterPath: string;
  readonly keyring: Keyring;
  readonly readiness: () => Record<string, ReadinessCheck>;
  readonly status: () => { inFlight: number; dedupeAvailable: boolean; keyIds: readonly string[] };
  /** What is consumed, for the header (redacted). */
  readonly source: string;
  /** Replays from the console; undefined when this worker cannot replay (it says why). */
  readonly replay: ReplayJobs | undefined;
  readonly replayUnavailable?: string | undefined;
  /** From PARTNER_EVENTS_CONSOLE_TOKEN; without one, nothing that changes state is allowed off loopback. */
  readonly token: string | undefined;
  /** Whether the ops server listens on loopback only. */
  readonly loopback: boolean;
}

const PAGE_SIZE_MAX = 200;
const MAX_SELECTION = 100_000;
const MAX_POST_BYTES = 4 << 20;

/** Every console answer: no inline script or style, nothing from elsewhere, never framed, never cached. */
const SECURITY_HEADERS = {
  'content-security-policy':
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
  'x-content-type-options': 'nosniff',
  'referrer-policy': 'no-referrer',
  'x-frame-options': 'DENY',
  'cache-control': 'no-store',
} as const;

/**
 * The console on the ops port: the page and its script at `/`, and a small JSON API under
 * `/console/api/`. Reading is open on loopback; replays need the token and a same-origin POST.
 * Bodies (health data) are sent only when asked for one letter at a time, never in the page.
 */
export class ConsoleServer {
  readonly #options: ConsoleOptions;
  readonly #index: DeadLetterIndex;
  readonly #tokenDigest: Buffer | undefined;
  readonly #streams = new EventStreams();

  constructor(options: ConsoleOptions) {
    this.#options = options;
    this.#index = new DeadLetterIndex(options.deadLetterPath);
    this.#tokenDigest = options.token ? digest(options.token) : undefined;
  }

  /** Handles console paths; false for anything else (the ops server answers those). */
  handle(req: IncomingMessage, res: ServerResponse): boolean {
    const url = new URL(req.url ?? '/', 'http://console.invalid');
    const path = url.pathname;
    if (path !== '/' && !path.startsWith('/console/')) return false;
    if (this.#options.loopback && !loopbackHost(req.headers.host)) {
      // DNS rebinding: a page of another site whose name now points here would be same-origin.
      send(res, 421, { error: 'the console answers only to 127.0.0.1, [::1] or localhost' });
      return true;
    }
    try {
      if (req.method === 'POST') this.#post(req, res, path);
      else if (req.method === 'GET' || req.method === 'HEAD') this.#get(req, res, path, url.searchParams);
      else send(res, 405, { error: 'method not allowed' }, { allow: 'GET, HEAD, POST' });
    } catch (error) {
      send(res, 500, { error: error instanceof Error ? error.message : 'console error' });
    }
    return true;
  }

  /** Whether replays can be started here: a token is set, or the console is on loopback. */
  get writable(): boolean {
    return this.#tokenDigest !== undefined || this.#options.loopback;
  }

  #get(req: IncomingMessage, res: ServerResponse, path: string, query: URLSearchParams): void {
    if (path === '/') return void sendText(res, 200, 'text/html; charset=utf-8', CONSOLE_HTML);
    if (path === '/console/app.js')
      return void sendText(res, 200, 'text/javascript; charset=utf-8', CONSOLE_JS);
    if (path === '/console/app.css') return void sendText(res, 200, 'text/css; charset=utf-8', CONSOLE_CSS);
    if (path === '/console/api/live') return void send(res, 200, this.#live());
    if (path === '/console/api/stream') return void this.#stream(res);
    if (path === '/console/api/letters') return void this.#letters(res, query);
    const letter = /^\/console\/api\/letters\/(\d+)(\/raw)?$/.exec(path);
    if (letter)
      return void this.#letter(req, res, Number(letter[1]), query.get('generation'), letter[2] !== undefined);
    const job = /^\/console\/api\/replays\/([0-9a-f-]{36})$/.exec(path);
    if (job) {
      const found = this.#options.replay?.get(job[1] as string);
      return void (found ? send(res, 200, found) : send(res, 404, { error: 'no such replay' }));
    }
    send(res, 404, { error: 'not found' });
  }

  #live() {
    const status = this.#options.status();
    return {
      source: this.#options.source,
      deadLetterFile: this.#options.deadLetterPath,
      writable: this.writable,
      tokenRequired: this.#tokenDigest !== undefined,
      replay: this.#options.replay
        ? { to: this.#options.replay.description }
        : { unavailable: this.#options.replayUnavailable ?? 'not available' },
      inFlight: status.inFlight,
      dedupeAvailable: status.dedupeAvailable,
      keyIds: status.keyIds,
      readiness: this.#options.readiness(),
      stats: this.#options.stats.snapshot(),
    };
  }

  /** Server-sent events: the live numbers once a second until the page goes away or `close()`. */
  #stream(res: ServerResponse): void {
    this.#streams.open(res, SECURITY_HEADERS, () => JSON.stringify(this.#live()), 1000);
  }

  /** Ends the live streams, which never end by themselves, so that the ops server can close. */
  close(): void {
    this.#streams.endAll();
  }

  #letters(res: ServerResponse, query: URLSearchParams): void {
    const page = Math.max(0, Number(query.get('page') ?? 0) || 0);
    const size = Math.min(PAGE_SIZE_MAX, Math.max(1, Number(query.get('size') ?? 50) || 50));
    const filter = filterOf(query);
    // The first filter parses every line: in chunks, so the worker keeps going meanwhile.
    this.#index.summarizeAll().then(
      () => send(res, 200, this.#index.page(filter, page, size)),
      (error: Error) => send(res, 500, { error: error.message }),
    );
  }

  #letter(
    req: IncomingMessage,
    res: ServerResponse,
    n: number,
    generation: string | null,
    raw: boolean,
  ): void {
    this.#index.refresh();
    if (generation !== null && generation !== this.#index.generation) {
      return void send(res, 409, { error: 'the dead-letter file was replaced: reload the list' });
    }
    const line = this.#index.line(n);
    if (line === undefined) return void send(res, 404, { error: 'no such letter' });
    if (!raw) return void send(res, 200, letterDetail(n, line, this.#options.keyring));
    // The message (health data): on request only, and with the token off loopback.
    if (!this.#options.loopback && !this.#tokenOk(req)) {
      return void send(res, 401, {
        error: `showing a body here needs the console token (${CONSOLE_TOKEN_ENV})`,
      });
    }
    const answer = rawAnswer(n, line);
    send(res, answer ? 200 : 422, answer ?? { error: 'the line is not a JSON record' });
  }

  #post(req: IncomingMessage, res: ServerResponse, path: string): void {
    if (path !== '/console/api/replays') return void send(res, 404, { error: 'not found' });
    const refusal = this.#refuseChange(req);
    if (refusal) return void send(res, refusal.status, { error: refusal.error });
    readJson(req, MAX_POST_BYTES).then(
      async (body) => {
        await this.#index.summarizeAll(); // a selection by filter reads every line's fields
        this.#startReplay(res, body);
      },
      (error: Error) => send(res, 400, { error: error.message }),
    );
  }

  /** A state change needs: a same-origin JSON POST, and the token (when one is set, or off loopback). */
  #refuseChange(req: IncomingMessage): { status: number; error: string } | undefined {
    const origin = req.headers.origin;
    const host = req.headers.host;
    if (!origin || !host || origin !== `http://${host}`) {
      return {
        status: 403,
        error: 'cross-origin request refused: replays start from the console page itself',
      };
    }
    if (req.headers['sec-fetch-site'] && req.headers['sec-fetch-site'] !== 'same-origin') {
      return { status: 403, error: 'cross-site request refused' };
    }
    if (!String(req.headers['content-type'] ?? '').startsWith('application/json')) {
      return { status: 415, error: 'send JSON' };
    }
    if (!this.#tokenDigest) {
      return this.#options.loopback
        ? undefined
        : {
            status: 403,
            error: `read-only: the console is not on loopback and ${CONSOLE_TOKEN_ENV} is not set`,
          };
    }
    if (!this.#tokenOk(req))
      return { status: 401, error: `a replay needs the console token (${CONSOLE_TOKEN_ENV})` };
    return undefined;
  }

  #tokenOk(req: IncomingMessage): boolean {
    if (!this.#tokenDigest) return false;
    const header = String(req.headers.authorization ?? '');
    const given = header.startsWith('Bearer ') ? header.slice('Bearer '.length) : '';
    // Digests: equal lengths whatever was sent, so the comparison takes the same time.
    return timingSafeEqual(digest(given), this.#tokenDigest);
  }

  #startReplay(res: ServerResponse, body: unknown): void {
    const replay = this.#options.replay;
    if (!replay)
      return void send(res, 409, { error: this.#options.replayUnavailable ?? 'replay is not available' });
    if (replay.running) return void send(res, 409, { error: 'a replay is running: wait for it to finish' });
    const request = (body ?? {}) as {
      letters?: unknown;
      filter?: unknown;
      generation?: unknown;
      dryRun?: unknown;
    };
    this.#index.refresh();
    if (request.generation !== this.#index.generation) {
      return void send(res, 409, { error: 'the dead-letter file was replaced: reload the list' });
    }
    let numbers: number[];
    if (Array.isArray(request.letters)) {
      numbers = request.letters.filter((n): n is number => Number.isInteger(n));
    } else if (request.filter && typeof request.filter === 'object') {
      numbers = this.#index.select(filterOf(new URLSearchParams(request.filter as Record<string, string>)));
    } else {
      return void send(res, 400, { error: 'send letters: [n, …] or filter: {…}' });
    }
    if (numbers.length === 0) return void send(res, 400, { error: 'nothing selected' });
    if (numbers.length > MAX_SELECTION)
      return void send(res, 400, { error: `at most ${MAX_SELECTION} letters at once` });
    const lines = [...new Set(numbers)].sort((a, b) => a - b).map((n) => this.#index.line(n));
    if (lines.some((line) => line === undefined)) return void send(res, 404, { error: 'no such letter' });
    const job = replay.start(lines as string[], request.dryRun !== false);
    send(res, 202, { id: job.id, dryRun: job.dryRun, letters: job.letters });
  }
}

/** A letter's message, as the detail view shows it on request; undefined for a line that is not JSON. */
function rawAnswer(n: number, line: string): Record<string, unknown> | undefined {
  let record: Record<string, unknown>;
  try {
    record = JSON.parse(line) as Record<string, unknown>;
  } catch {
    return undefined;
  }
  const bytes = recordBytes(record);
  return {
    n,
    encoding: record.raw_encoding ?? null,
    truncated: record.raw_truncated === true,
    message: Buffer.isBuffer(bytes) ? bytes.toString('utf8') : String(record.raw ?? ''),
  };
}

function filterOf(query: URLSearchParams): LetterFilter {
  const codes = (query.get('code') ?? '')
    .split(',')
    .map((c) => c.trim().toUpperCase())
    .filter((c) => c !== '');
  const time = (name: string) => {
    const value = query.get(name);
    if (!value) return undefined;
    const ms = Date.parse(value);
    return Number.isNaN(ms) ? undefined : new Date(ms).toISOString();
  };
  return {
    codes,
    type: query.get('type')?.trim() || undefined,
    eventId: query.get('event_id')?.trim() || undefined,
    since: time('since'),
    until: time('until'),
  };
}

function loopbackHost(host: string | undefined): boolean {
  if (!host) return false;
  const name = host.startsWith('[') ? host.slice(0, host.indexOf(']') + 1) : host.split(':')[0];
  return name === '127.0.0.1' || name === '[::1]' || name === 'localhost';
}

function digest(text: string): Buffer {
  return createHash('sha256').update(text).digest();
}

function send(
  res: ServerResponse,
  status: number,
  body: unknown,
  headers: Record<string, string> = {},
): void {
  res
    .writeHead(status, { ...SECURITY_HEADERS, 'content-type': 'application/json; charset=utf-8', ...headers })
    .end(`${JSON.stringify(body)}\n`);
}

function sendText(res: ServerResponse, status: number, type: string, text: string): void {
  res.writeHead(status, { ...SECURITY_HEADERS, 'content-type': type }).end(text);
}

function readJson(req: IncomingMessage, limit: number): Promise<unknown> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    req.on('data', (chunk: Buffer) => {
      size += chunk.length;
      if (size > limit) {
        reject(new Error('request too large'));
        req.destroy();
        return;
      }
      chunks.push(chunk);
    });
    req.on('end', () => {
      try {
        resolve(JSON.parse(Buffer.concat(chunks).toString('utf8')));
      } catch {
        reject(new Error('the request body is not JSON'));
      }
    });
    req.on('error', reject);
  });
}
