// A throwaway Redis for tests: `redis-server` on a free loopback port, in a temp dir, nothing persisted.

import { existsSync } from 'node:fs';
import { mkdtemp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { freePorts } from '../launcher/ports.js';
import { ServerNotFoundError, startServer } from './server-process.js';

/** A running throwaway Redis from {@link startRedis}. `await using` stops it. */
export interface RedisServer extends AsyncDisposable {
  /** `redis://127.0.0.1:<port>`: give it to `new Redis(url)` (ioredis) or `createClient({ url })`. */
  readonly url: string;
  readonly host: string;
  readonly port: number;
  /** The server's process id. */
  readonly pid: number;
  /** The server's temp dir (`server.log`), removed by stop(). */
  readonly dir: string;
  /** Stops the server and removes its dir. Idempotent. */
  stop(): Promise<void>;
}

/** Options of {@link startRedis}. */
export interface StartRedisOptions {
  /** The `redis-server` binary. Default: `REDIS_SERVER`, else `redis-server` on PATH. */
  binary?: string;
}

/** The `redis-server` binary: `binary`, `REDIS_SERVER`, or the first on PATH; undefined when none. */
export function findRedis(binary = process.env.REDIS_SERVER): string | undefined {
  if (binary) return existsSync(binary) ? binary : undefined;
  for (const dir of (process.env.PATH ?? '').split(path.delimiter)) {
    if (dir && existsSync(path.join(dir, 'redis-server'))) return path.join(dir, 'redis-server');
  }
  return undefined;
}

/**
 * Starts a throwaway Redis on a free loopback port (no snapshot, no append-only file) and resolves
 * once it accepts connections. Throws {@link ServerNotFoundError} when redis-server is not installed.
 *
 * @example
 * ```ts
 * await using redis = await startRedis();
 * const client = new Redis(redis.url);
 * ```
 */
export async function startRedis(options: StartRedisOptions = {}): Promise<RedisServer> {
  const named = options.binary ?? process.env.REDIS_SERVER;
  const binary = findRedis(named);
  if (!binary) {
    throw new ServerNotFoundError(
      'redis',
      `redis-server was not found ${named ? `at ${named}` : 'on PATH'}; install it (Debian: apt-get install redis-server) or set REDIS_SERVER`,
    );
  }
  const dir = await mkdtemp(path.join(tmpdir(), 'etcd-concurrency-redis-'));
  const [port] = await freePorts(1);
  const args = [
    '--port',
    String(port),
    '--bind',
    '127.0.0.1',
    '--dir',
    dir,
    '--save',
    '',
    '--appendonly',
    'no',
    '--daemonize',
    'no',
    '--loglevel',
    'notice',
  ];
  const proc = await startServer('redis-server', binary, args, dir, /Ready to accept connections/);
  let stopped: Promise<void> | undefined;
  const stop = (): Promise<void> => (stopped ??= proc.stop('SIGTERM'));
  return { url: `redis://127.0.0.1:${port}`, host: '127.0.0.1', port: port!, pid: proc.pid, dir, stop, [Symbol.asyncDispose]: stop };
}
