// A throwaway PostgreSQL for tests: initdb into a temp dir, then `postgres` on a free loopback port,
// with trust authentication and durability off (it is thrown away).

import { spawn, spawnSync } from 'node:child_process';
import { existsSync, readdirSync } from 'node:fs';
import { chown, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { freePorts } from '../launcher/ports.js';
import { logTail, ServerNotFoundError, ServerStartError, startServer } from './server-process.js';

/** A running throwaway PostgreSQL from {@link startPostgres}. `await using` stops it. */
export interface PostgresServer extends AsyncDisposable {
  /** `postgres://postgres@127.0.0.1:<port>/postgres`: give it to `new pg.Pool({ connectionString })`. */
  readonly connectionString: string;
  readonly host: string;
  readonly port: number;
  /** The superuser, `postgres` (trust authentication: no password). */
  readonly user: string;
  readonly database: string;
  /** The server's process id. */
  readonly pid: number;
  /** PostgreSQL's major version, e.g. `15`. */
  readonly version: string;
  /** The server's temp dir (data, socket, `server.log`), removed by stop(). */
  readonly dir: string;
  /** Stops the server (fast shutdown: open connections are ended) and removes its files. Idempotent. */
  stop(): Promise<void>;
}

/** Options of {@link startPostgres}. */
export interface StartPostgresOptions {
  /** Where `initdb` and `postgres` are. Default: `PG_BIN`, else the newest `/usr/lib/postgresql/<n>/bin`, else PATH. */
  binDir?: string;
}

/**
 * The directory of PostgreSQL's server binaries (`initdb`, `postgres`), or undefined when none is
 * installed: `binDir`, `PG_BIN`, the newest Debian `/usr/lib/postgresql/<major>/bin`, or PATH.
 */
export function findPostgres(binDir = process.env.PG_BIN): string | undefined {
  const has = (dir: string): boolean => existsSync(path.join(dir, 'initdb')) && existsSync(path.join(dir, 'postgres'));
  if (binDir) return has(binDir) ? binDir : undefined;
  const debian = '/usr/lib/postgresql';
  const majors = existsSync(debian)
    ? readdirSync(debian)
        .filter((d) => /^\d+$/.test(d))
        .sort((a, b) => Number(b) - Number(a))
    : [];
  for (const m of majors) if (has(path.join(debian, m, 'bin'))) return path.join(debian, m, 'bin');
  for (const dir of (process.env.PATH ?? '').split(path.delimiter)) if (dir && has(dir)) return dir;
  return undefined;
}

/**
 * Starts a throwaway PostgreSQL on a free loopback port, in a new temp dir, and resolves once it
 * accepts connections. As root it runs as the `postgres` system user (initdb refuses root). Throws
 * {@link ServerNotFoundError} when PostgreSQL is not installed.
 *
 * @example
 * ```ts
 * await using pg = await startPostgres();
 * const pool = new Pool({ connectionString: pg.connectionString });
 * ```
 */
export async function startPostgres(options: StartPostgresOptions = {}): Promise<PostgresServer> {
  const bin = findPostgres(options.binDir ?? process.env.PG_BIN);
  if (!bin) {
    throw new ServerNotFoundError(
      'postgres',
      `PostgreSQL's server binaries (initdb, postgres) were not found${(options.binDir ?? process.env.PG_BIN) ? ` in ${options.binDir ?? process.env.PG_BIN}` : ' under /usr/lib/postgresql/*/bin nor on PATH'}; ` +
        'install them (Debian: apt-get install postgresql) or set PG_BIN',
    );
  }
  const owner = process.getuid?.() === 0 ? systemUser('postgres') : undefined;
  const dir = await mkdtemp(path.join(tmpdir(), 'etcd-concurrency-pg-'));
  if (owner) await chown(dir, owner.uid, owner.gid);
  const env = { PATH: process.env.PATH ?? '/usr/bin:/bin', LC_ALL: 'C', LANG: 'C', TZ: 'UTC' };
  const spawnAs = { ...owner, env };
  const data = path.join(dir, 'data');
  const init = await runToEnd(
    path.join(bin, 'initdb'),
    ['-D', data, '-U', 'postgres', '-A', 'trust', '-E', 'UTF8', '--locale=C', '--no-sync'],
    dir,
    spawnAs,
  );
  if (init.code !== 0) {
    await rm(dir, { recursive: true, force: true });
    throw new ServerStartError(`initdb ${init.how}; its output:\n${init.output.trimEnd().split('\n').slice(-30).join('\n')}`);
  }
  const [port] = await freePorts(1);
  const args = [
    '-D',
    data,
    '-p',
    String(port),
    '-h',
    '127.0.0.1',
    '-k',
    dir,
    // Thrown away afterwards: durability buys nothing, and fsyncs would slow every test.
    '-c',
    'fsync=off',
    '-c',
    'synchronous_commit=off',
    '-c',
    'full_page_writes=off',
    '-c',
    'lc_messages=C',
    '-c',
    'max_connections=100',
  ];
  const proc = await startServer(
    'postgres',
    path.join(bin, 'postgres'),
    args,
    dir,
    /database system is ready to accept connections/,
    spawnAs,
  );
  const version = path.basename(path.dirname(bin));
  let stopped: Promise<void> | undefined;
  const stop = (): Promise<void> => (stopped ??= proc.stop('SIGINT'));
  return {
    connectionString: `postgres://postgres@127.0.0.1:${port}/postgres`,
    host: '127.0.0.1',
    port: port!,
    user: 'postgres',
    database: 'postgres',
    pid: proc.pid,
    dir,
    version: /^\d+$/.test(version) ? version : ((await logTail(proc.logFile)).match(/PostgreSQL (\d+)/)?.[1] ?? 'unknown'),
    stop,
    [Symbol.asyncDispose]: stop,
  };
}

/** uid and gid of a system user, from `id`. */
function systemUser(name: string): { uid: number; gid: number } {
  const uid = spawnSync('id', ['-u', name], { encoding: 'utf8' });
  const gid = spawnSync('id', ['-g', name], { encoding: 'utf8' });
  if (uid.status !== 0 || gid.status !== 0) {
    throw new ServerNotFoundError(
      'postgres',
      `running as root, PostgreSQL must run as the "${name}" system user, which does not exist (Debian's postgresql package creates it)`,
    );
  }
  return { uid: Number(uid.stdout.trim()), gid: Number(gid.stdout.trim()) };
}

/** Runs a command to its end, collecting its output. */
function runToEnd(
  binary: string,
  args: string[],
  cwd: string,
  options: { uid?: number; gid?: number; env: NodeJS.ProcessEnv },
): Promise<{ code: number | null; how: string; output: string }> {
  return new Promise((resolve) => {
    const child = spawn(binary, args, { ...options, cwd, stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    child.stdout.on('data', (d: Buffer) => (output += d.toString('utf8')));
    child.stderr.on('data', (d: Buffer) => (output += d.toString('utf8')));
    child.once('error', (err) => resolve({ code: null, how: `failed to spawn: ${err.message}`, output }));
    child.once('close', (code, signal) => resolve({ code, how: signal ? `was killed by ${signal}` : `exited with code ${code}`, output }));
  });
}
