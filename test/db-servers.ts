// The real PostgreSQL and Redis of the fencing tests: one server per test file, started before its
// tests and stopped after them (etcd-concurrency/testing's startPostgres and startRedis). Without
// the server installed, each test that needs it skips with the reason printed; under CI (CI set,
// not "false" or "0") it FAILS instead, so that "passes in CI" means it ran. FENCING_ALLOW_SKIP=1
// is the explicit opt-out for a CI machine known to lack them.
import assert from 'node:assert/strict';
import { after, before, type TestContext } from 'node:test';
import { ServerNotFoundError, startPostgres, startRedis, type PostgresServer, type RedisServer } from '../src/testing/index.js';

const MUST_RUN = !!process.env.CI && !/^(false|0)$/i.test(process.env.CI) && process.env.FENCING_ALLOW_SKIP !== '1';

/** A server of the test file: `need(t)` returns it, or skips the test (fails it under CI) without it. */
export interface FileServer<S> {
  need(t: TestContext): S | undefined;
  /** The server, once started (in the file's `before`); undefined without it. */
  readonly server: S | undefined;
}

/**
 * For a test that starts its own server: false (go on) when `missing` is undefined; else skips the
 * test with that reason and returns true, or fails it under CI.
 */
export function skipWithout(t: TestContext, what: string, missing: string | undefined): boolean {
  if (missing === undefined) return false;
  if (MUST_RUN)
    assert.fail(
      `no ${what} under CI=${process.env.CI}: ${missing}. Install it (.ci/run does), or set FENCING_ALLOW_SKIP=1 to let these tests skip`,
    );
  t.skip(missing);
  return true;
}

function serverForFile<S extends { stop(): Promise<void> }>(what: string, start: () => Promise<S>): FileServer<S> {
  let server: S | undefined;
  let skipReason: string | undefined;
  before(async () => {
    try {
      server = await start();
    } catch (err) {
      if (!(err instanceof ServerNotFoundError)) throw err;
      skipReason = err.message;
      process.stderr.write(
        `fencing: ${MUST_RUN ? 'FAILING (CI; FENCING_ALLOW_SKIP=1 to skip)' : 'skipping'} the ${what} tests: ${skipReason}\n`,
      );
    }
  });
  after(async () => {
    await server?.stop();
  });
  return {
    get server() {
      return server;
    },
    need(t) {
      if (server) return server;
      skipWithout(t, what, skipReason ?? `${what} did not start`);
      return undefined;
    },
  };
}

/** The test file's PostgreSQL (started in `before`). */
export function postgresForFile(): FileServer<PostgresServer> {
  return serverForFile('PostgreSQL', () => startPostgres());
}

/** The test file's Redis (started in `before`). */
export function redisForFile(): FileServer<RedisServer> {
  return serverForFile('Redis', () => startRedis());
}
