/**
 * Every relative link of the repository's Markdown (README, docs/, examples/, deploy/, …) leads
 * somewhere: the file exists, and a `#fragment` names a heading of the target the way GitHub
 * renders it (github-slugger: the same slugs, `-1`, `-2` for repeats). Links to other sites are
 * not followed (no network in tests).
 */
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import GithubSlugger from 'github-slugger';
import { describe, expect, it } from 'vitest';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const SKIPPED_DIRS = new Set(['node_modules', 'dist', '.git', 'coverage']);

function markdownFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) return SKIPPED_DIRS.has(entry.name) ? [] : markdownFiles(path);
    return entry.name.endsWith('.md') ? [path] : [];
  });
}

/** The text outside fenced code blocks. */
function withoutFences(markdown: string): string {
  return markdown.replace(/^(```|~~~)[^\n]*\n[\s\S]*?^\1[^\n]*$/gm, '');
}

/** The text outside fenced code blocks and inline code spans: what GitHub renders as Markdown. */
function prose(markdown: string): string {
  return withoutFences(markdown).replace(/`[^`\n]*`/g, '');
}

/** The heading text GitHub slugs: inline code keeps its text, a link keeps its label. */
function headingText(line: string): string {
  return line
    .replace(/`([^`]*)`/g, '$1')
    .replace(/\[([^\]]*)\]\([^)]*\)/g, '$1')
    .trim();
}

const anchorCache = new Map<string, ReadonlySet<string>>();

/** The anchors of a Markdown file: its headings' slugs and any `<a id|name="…">`. */
function anchorsOf(file: string): ReadonlySet<string> {
  const cached = anchorCache.get(file);
  if (cached) return cached;
  const text = withoutFences(readFileSync(file, 'utf8'));
  const slugger = new GithubSlugger();
  const anchors = new Set<string>();
  for (const match of text.matchAll(/^#{1,6}[ \t]+(.+?)[ \t#]*$/gm)) {
    anchors.add(slugger.slug(headingText(match[1] as string)));
  }
  for (const match of text.matchAll(/<a\s+(?:id|name)="([^"]+)"/g)) anchors.add(match[1] as string);
  anchorCache.set(file, anchors);
  return anchors;
}

interface Link {
  readonly from: string;
  readonly target: string;
}

/** Inline links and images with a relative target (no scheme, not a bare `#fragment` elsewhere). */
function relativeLinks(file: string): Link[] {
  const text = prose(readFileSync(file, 'utf8'));
  const links: Link[] = [];
  for (const match of text.matchAll(/\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)/g)) {
    const target = match[1] as string;
    if (/^[a-z][a-z0-9+.-]*:/i.test(target)) continue; // https:, mailto:, …
    links.push({ from: relative(ROOT, file), target });
  }
  return links;
}

/** Why a link leads nowhere, or undefined when it resolves. */
function brokenReason(link: Link): string | undefined {
  const [path = '', fragment] = link.target.split('#', 2);
  const from = resolve(ROOT, link.from);
  const target = path === '' ? from : resolve(dirname(from), decodeURIComponent(path));
  if (!existsSync(target)) return 'no such file';
  if (fragment === undefined || fragment === '') return undefined;
  if (statSync(target).isDirectory() || !target.endsWith('.md')) return undefined;
  return anchorsOf(target).has(decodeURIComponent(fragment)) ? undefined : 'no such heading';
}

describe('links in the Markdown', () => {
  const files = markdownFiles(ROOT);

  it('finds the documentation to check', () => {
    const names = files.map((f) => relative(ROOT, f));
    expect(names).toContain('README.md');
    expect(names).toContain(join('docs', 'getting-started.md'));
    expect(files.flatMap(relativeLinks).length).toBeGreaterThan(100);
  });

  it('every relative link names a file that exists, and a heading of it that exists', () => {
    const broken = files
      .flatMap(relativeLinks)
      .map((link) => ({ ...link, reason: brokenReason(link) }))
      .filter((link) => link.reason !== undefined)
      .map((link) => `${link.from}: (${link.target}) ${link.reason}`);
    expect(broken).toEqual([]);
  });

  it('slugs headings as GitHub does, so a fragment that GitHub resolves passes', () => {
    const slugger = new GithubSlugger();
    // Punctuation dropped, spaces to hyphens, case folded, repeats numbered.
    expect(slugger.slug(headingText('Another host, and the order of the runs (2026-11-28)'))).toBe(
      'another-host-and-the-order-of-the-runs-2026-11-28',
    );
    expect(slugger.slug(headingText('`sampleEvent(type, fields?)` and `SAMPLE_USER_ID`'))).toBe(
      'sampleeventtype-fields-and-sample_user_id',
    );
    expect(slugger.slug('Reproducing')).toBe('reproducing');
    expect(slugger.slug('Reproducing')).toBe('reproducing-1');
  });

  it('reports a missing file and a missing heading', () => {
    expect(brokenReason({ from: 'README.md', target: 'docs/no-such-page.md' })).toBe('no such file');
    expect(brokenReason({ from: 'README.md', target: 'docs/performance.md#no-such-heading' })).toBe(
      'no such heading',
    );
    expect(brokenReason({ from: 'README.md', target: 'docs/performance.md#at-a-glance' })).toBeUndefined();
  });
});
