/**
 * The transport registry (src/transports.ts): which transport each spec form opens, the sidecar
 * config's sections built from it, and descriptors that load no SDK until they are opened.
 */
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it, vi } from 'vitest';
import type { z } from 'zod';
import { ConfigError } from '../src/core/errors.js';
import { importAdapterModule, SpecError } from '../src/core/transport.js';
import { configLeaves, envName } from '../src/sidecar/config.js';
import { describeSpec, specForms, TRANSPORTS, transportFor } from '../src/transports.js';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
/** Optional peers that adapters load besides their descriptor's `sdk`. */
const OTHER_SDKS = ['@azure/identity', '@azure/storage-blob', '@azure/eventhubs-checkpointstore-blob'];

afterEach(() => {
  vi.unstubAllEnvs();
});

describe('which transport a spec names', () => {
  const cases: [spec: string, source: string | undefined, target: string | undefined][] = [
    ['file:events.jsonl', 'file', 'file'],
    ['sqs:http://127.0.0.1:9324/000000000000/orders', 'sqs', 'sqs'],
    ['https://sqs.eu-west-1.amazonaws.com/123456789012/orders', 'sqs', 'sqs'],
    ['azure-storage-queue:orders', 'storage-queue', 'storage-queue'],
    ['https://acct.queue.core.windows.net/orders?sv=1&sig=x', 'storage-queue', 'storage-queue'],
    // The sovereign clouds, by the same (tested) check the CLI routes with.
    ['https://acct.queue.core.chinacloudapi.cn/orders', 'storage-queue', 'storage-queue'],
    ['HTTPS://ACCT.QUEUE.CORE.WINDOWS.NET/orders', 'storage-queue', 'storage-queue'],
    ['azure-event-hubs:orders', 'event-hubs', 'event-hubs'],
    ['http://127.0.0.1:8080/events', 'http', 'http'],
    ['http-ingress:http://127.0.0.1:8080/000000000000/q', 'http', 'http'],
    // An ingress listens on plain http; POSTing to https is fine.
    ['https://app.example/events', undefined, 'http'],
    ['amqps://broker.example/q', undefined, undefined],
  ];

  it.each(cases)('%s: source %s, target %s', (spec, source, target) => {
    vi.stubEnv('AWS_ENDPOINT_URL_SQS', '');
    vi.stubEnv('AWS_ENDPOINT_URL', '');
    expect(transportFor(spec, 'source')?.name).toBe(source);
    expect(transportFor(spec, 'target')?.name).toBe(target);
  });

  it('a local URL with a queue-shaped path is ambiguous without an endpoint, SQS with one', () => {
    vi.stubEnv('AWS_ENDPOINT_URL_SQS', '');
    vi.stubEnv('AWS_ENDPOINT_URL', '');
    const url = 'http://127.0.0.1:4566/000000000000/orders';
    expect(() => transportFor(url, 'source')).toThrow(SpecError);
    expect(() => transportFor(url, 'source')).toThrow(`--source ${url} is ambiguous`);
    expect(() => transportFor(url, 'target')).toThrow(`--to ${url} is ambiguous`);
    vi.stubEnv('AWS_ENDPOINT_URL_SQS', 'http://127.0.0.1:4566');
    expect(transportFor(url, 'source')?.name).toBe('sqs');
    expect(transportFor(url, 'target')?.name).toBe('sqs');
  });

  it('every transport lists its forms in the usage, and a spec prints without its credentials', () => {
    for (const transport of TRANSPORTS) {
      if ('source' in transport) expect(specForms('source')).toContain(transport.source.forms);
      if ('target' in transport) expect(specForms('target')).toContain(transport.target.forms);
    }
    const sas = 'https://user:Hunt3r2pw@acct.queue.core.windows.net/orders?sig=S3cr3t';
    expect(describeSpec(sas, 'target')).toBe('https://acct.queue.core.windows.net/orders');
    expect(describeSpec('amqps://u:Hunt3r2pw@broker/q', 'target')).toBe('amqps://broker/q');
  });
});

describe('the sidecar config, from the registry', () => {
  it('has one section per transport with options, each leaf with its environment variable', () => {
    const keys = TRANSPORTS.flatMap((t) => ('options' in t ? [t.options.key] : []));
    expect(keys.sort()).toEqual(['eventHubs', 'http', 'sqs', 'storageQueue']);
    const names = configLeaves().map((leaf) => envName(leaf.path));
    expect(names).toContain('PARTNER_EVENTS_SQS_BATCH_SIZE');
    expect(names).toContain('PARTNER_EVENTS_STORAGE_QUEUE_ENCODING');
    expect(names).toContain('PARTNER_EVENTS_EVENT_HUBS_START_POSITION');
    expect(names).toContain('PARTNER_EVENTS_HTTP_BODY_TIMEOUT_MS');
  });
});

describe('the options docs, from the schemas', () => {
  it("docs/sidecar.md lists every option of every section with its variable and the schema's default", () => {
    const rows = new Map<string, string[]>();
    for (const line of readFileSync(join(ROOT, 'docs/sidecar.md'), 'utf8').split('\n')) {
      const cells = line.split(/(?<!\\)\|/).map((cell) => cell.trim()); // `\|` is a | inside a cell
      const key = /^`([\w.]+)`$/.exec(cells[1] ?? '')?.[1];
      if (key) rows.set(key, cells);
    }
    expect(rows.get('sqs.batchSize')?.[5]).toBe('`10`'); // a positive control: the table is read
    const wrong: string[] = [];
    for (const transport of TRANSPORTS) {
      if (!('options' in transport)) continue;
      const { key: section, schema } = transport.options;
      for (const [option, field] of Object.entries(schema.shape as Record<string, z.ZodType>)) {
        const path = `${section}.${option}`;
        const cells = rows.get(path);
        if (!cells) {
          wrong.push(`${path}: no row`);
          continue;
        }
        if (cells[2] !== `\`${envName([section, option])}\``) wrong.push(`${path}: variable ${cells[2]}`);
        const value = defaultOf(field);
        const shown = (cells[5] ?? '').replace(/[`\s]/g, '');
        if (value !== undefined && !shown.includes(String(value)))
          wrong.push(`${path}: default ${cells[5]}, schema ${value}`);
      }
    }
    expect(wrong).toEqual([]);
  });
});

describe('descriptors and SDKs', () => {
  it('a descriptor module loads no SDK, not even through what it imports', () => {
    const loaded = new Set<string>();
    const descriptors = readdirSync(join(ROOT, 'adapters')).filter((name) =>
      existsSync(join(ROOT, 'adapters', name, 'cli.ts')),
    );
    expect(descriptors).toHaveLength(TRANSPORTS.length);
    for (const transport of descriptors) {
      for (const pkg of valueImports(join(ROOT, 'adapters', transport, 'cli.ts'))) loaded.add(pkg);
    }
    expect(loaded).toContain('zod'); // the scan follows imports (options schemas use zod)
    const sdks = [...TRANSPORTS.flatMap((t) => ('sdk' in t ? [t.sdk] : [])), ...OTHER_SDKS];
    expect(sdks).toContain('@aws-sdk/client-sqs');
    for (const sdk of sdks) expect(loaded).not.toContain(sdk);
  });

  it('a missing SDK is named with the command that installs it', async () => {
    const missing = () => import('@example/not-installed' as string);
    const attempt = importAdapterModule('@example/not-installed', 'source', missing);
    await expect(attempt).rejects.toThrow(ConfigError);
    await expect(importAdapterModule('@example/not-installed', 'target', missing)).rejects.toThrow(
      'this target needs the @example/not-installed package: npm install @example/not-installed',
    );
  });
});

/** The default a field's schema fills in, if it has one. */
function defaultOf(field: z.ZodType): unknown {
  const def = (field as unknown as { _zod: { def: { type: string; defaultValue?: unknown } } })._zod.def;
  return def.type === 'default' ? def.defaultValue : undefined;
}

/**
 * Bare packages a TS module loads when it is imported, following its relative imports. Type-only
 * imports (`import type`, `export type`) are erased; `import()` is not followed (it loads later).
 */
function valueImports(file: string, seen = new Set<string>()): string[] {
  if (seen.has(file)) return [];
  seen.add(file);
  const packages = new Set<string>();
  const text = readFileSync(file, 'utf8');
  for (const match of text.matchAll(
    /^(?:import|export)\s+(?!type\s)[^;]*?from\s*'([^']+)'|^import\s*'([^']+)'/gm,
  )) {
    const spec = match[1] ?? match[2] ?? '';
    if (spec.startsWith('.')) {
      for (const name of valueImports(join(dirname(file), spec.replace(/\.js$/, '.ts')), seen))
        packages.add(name);
    } else if (!spec.startsWith('node:')) {
      packages.add(
        spec.startsWith('@') ? spec.split('/').slice(0, 2).join('/') : (spec.split('/')[0] ?? spec),
      );
    }
  }
  return [...packages];
}
