import { readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';

// Issue 13: no function over ~60 lines and no class over ~200 in src/ and adapters/, except where
// a comment says why. The reason goes in a comment starting `long:` just above the function or
// class (or the statement that holds it).
const ROOT = fileURLToPath(new URL('..', import.meta.url));
const MAX_LINES = 60;
const MAX_CLASS_LINES = 210;

interface LongFunction {
  readonly name: string;
  readonly lines: number;
}

/**
 * Every function with a body over `MAX_LINES` lines (nested ones count inside their parent too)
 * and every class over `MAX_CLASS_LINES`, without a reason.
 */
function longFunctions(fileName: string, text: string): LongFunction[] {
  const source = ts.createSourceFile(fileName, text, ts.ScriptTarget.Latest, true);
  const lineOf = (position: number) => source.getLineAndCharacterOfPosition(position).line;
  const found: LongFunction[] = [];
  const visit = (node: ts.Node) => {
    const lines = lineOf(node.getEnd()) - lineOf(node.getStart(source)) + 1;
    if (ts.isFunctionLike(node) && 'body' in node && node.body) {
      if (lines > MAX_LINES && !hasReason(node, source)) found.push({ name: nameOf(node, source), lines });
    } else if (ts.isClassLike(node) && lines > MAX_CLASS_LINES && !hasReason(node, source)) {
      found.push({ name: `class ${node.name?.text ?? '(anonymous)'}`, lines });
    }
    ts.forEachChild(node, visit);
  };
  visit(source);
  return found;
}

/** A `long:` comment before the function, or before the statement on its first line that holds it. */
function hasReason(node: ts.Node, source: ts.SourceFile): boolean {
  const startLine = source.getLineAndCharacterOfPosition(node.getStart(source)).line;
  for (let n: ts.Node | undefined = node; n && !ts.isSourceFile(n); n = n.parent) {
    if (source.getLineAndCharacterOfPosition(n.getStart(source)).line !== startLine) break;
    const comments = ts.getLeadingCommentRanges(source.text, n.getFullStart()) ?? [];
    if (comments.some((c) => /^\s*(\/\/|\/?\*)\s*long:/m.test(source.text.slice(c.pos, c.end)))) return true;
  }
  return false;
}

function nameOf(node: ts.SignatureDeclaration, source: ts.SourceFile): string {
  if (ts.isConstructorDeclaration(node)) return `${node.parent.name?.text ?? '(class)'} constructor`;
  if (node.name) return node.name.getText(source);
  const parent = node.parent;
  if (
    (ts.isVariableDeclaration(parent) ||
      ts.isPropertyAssignment(parent) ||
      ts.isPropertyDeclaration(parent)) &&
    parent.name
  ) {
    return parent.name.getText(source);
  }
  return `(anonymous, line ${source.getLineAndCharacterOfPosition(node.getStart(source)).line + 1})`;
}

function sourceFiles(dir: string): string[] {
  return readdirSync(join(ROOT, dir), { withFileTypes: true, recursive: true })
    .filter((entry) => entry.isFile() && entry.name.endsWith('.ts'))
    .map((entry) => relative(ROOT, join(entry.parentPath, entry.name)));
}

describe('function size', () => {
  const body = (n: number) => Array.from({ length: n }, (_, i) => `  const x${i} = ${i};`).join('\n');

  it('finds a function over the limit, in any form, and accepts one with a reason (a positive control)', () => {
    const text = [
      `export function tooLong() {\n${body(MAX_LINES - 1)}\n}`,
      `export function fits() {\n${body(MAX_LINES - 2)}\n}`,
      `const arrow = async () => {\n${body(MAX_LINES - 1)}\n};`,
      `class C {\n  constructor() {\n${body(MAX_LINES - 1)}\n  }\n}`,
      `// long: one table, read top to bottom\nfunction explained() {\n${body(MAX_LINES)}\n}`,
      `/**\n * Documented.\n * long: a state machine in one place\n */\nconst alsoExplained = () => {\n${body(MAX_LINES)}\n};`,
      `class Big {\n${body(MAX_CLASS_LINES - 1)}\n}`,
      `class Fits {\n${body(MAX_CLASS_LINES - 2)}\n}`,
      `/**\n * A class.\n * long: one state shared by every method\n */\nexport class BigWithReason {\n${body(MAX_CLASS_LINES)}\n}`,
    ].join('\n');
    expect(longFunctions('sample.ts', text)).toEqual([
      { name: 'tooLong', lines: MAX_LINES + 1 },
      { name: 'arrow', lines: MAX_LINES + 1 },
      { name: 'C constructor', lines: MAX_LINES + 1 },
      { name: 'class Big', lines: MAX_CLASS_LINES + 1 },
    ]);
  });

  it(`no function in src/ or adapters/ is over ${MAX_LINES} lines, no class over ${MAX_CLASS_LINES}, without a "long:" reason`, () => {
    const files = [...sourceFiles('src'), ...sourceFiles('adapters')];
    expect(files).toContain('src/core/verify.ts');
    expect(files).toContain('adapters/sqs/adapter.ts');
    const over: string[] = [];
    for (const file of files) {
      for (const { name, lines } of longFunctions(file, readFileSync(join(ROOT, file), 'utf8'))) {
        over.push(`${file} ${name}: ${lines} lines`);
      }
    }
    expect(over).toEqual([]);
  });
});
