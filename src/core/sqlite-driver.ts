/**
 * The better-sqlite3 build for the running Node. Import `Database` from here, never from
 * 'better-sqlite3' directly.
 *
 * better-sqlite3 12 derives its Database and Statement objects from Node's `node::ObjectWrap`. From
 * Node 24.19 that class's destructor removes a per-object cleanup hook and CHECKs that a Node
 * environment is current; when V8 collects a statement while none is (e.g. a burst of claims on
 * the SQLite dedupe store), the process aborts with `RemoveEnvironmentCleanupHook ... Assertion
 * failed: (env) != nullptr`. better-sqlite3 13 is built on Node-API and has no such destructor, but
 * needs Node >= 22 (it crashes on Node 20). So 13 on Node >= 22, 12 (an optional dependency) on
 * Node 20. The API the kit uses is the same in both.
 */
import { createRequire } from 'node:module';
import type BetterSqlite3 from 'better-sqlite3';

/** The first Node major on which better-sqlite3 13 runs. */
const NODE_API_BUILD_FROM = 22;

const nodeMajor = Number(process.versions.node.split('.')[0]);
const packageName = nodeMajor >= NODE_API_BUILD_FROM ? 'better-sqlite3-13' : 'better-sqlite3';

/**
 * When the package is missing the kit still imports (Redis or memory dedupe need no SQLite);
 * opening a database throws.
 */
function load(): typeof BetterSqlite3 {
  try {
    return createRequire(import.meta.url)(packageName) as typeof BetterSqlite3;
  } catch (cause) {
    const missing = new Error(
      `${packageName} (SQLite for Node ${process.versions.node}) is not installed: reinstall partner-health-events' dependencies`,
      { cause },
    );
    return function sqliteUnavailable(): never {
      throw missing;
    } as unknown as typeof BetterSqlite3;
  }
}

const Database: typeof BetterSqlite3 = load();

// The types callers name as `Database.Database` etc., as with `import Database from 'better-sqlite3'`.
declare namespace Database {
  type Database = BetterSqlite3.Database;
  type Statement<BindParameters extends unknown[] = unknown[], Result = unknown> = BetterSqlite3.Statement<
    BindParameters,
    Result
  >;
  type Transaction<F extends Parameters<BetterSqlite3.Database['transaction']>[0]> =
    BetterSqlite3.Transaction<F>;
}

export default Database;
