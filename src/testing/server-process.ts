// One throwaway database server process for tests (PostgreSQL or Redis): spawned in its own temp
// dir, ready when its log says so, stopped and its dir removed afterwards, and killed with the
// test process if that ends first.

import { spawn, type ChildProcess, type SpawnOptions } from 'node:child_process';
import { createWriteStream, rmSync } from 'node:fs';
import { readFile, rm } from 'node:fs/promises';
import path from 'node:path';

/** The server binary (`postgres`, `initdb`, `redis-server`) is not installed where it was looked for. */
export class ServerNotFoundError extends Error {
  override readonly name = 'ServerNotFoundError';
  constructor(
    /** `postgres` or `redis`. */
    readonly server: string,
    message: string,
  ) {
    super(message);
  }
}

/** The server did not start: the message ends with the tail of its log. */
export class ServerStartError extends Error {
  override readonly name = 'ServerStartError';
}

const LOG_TAIL_LINES = 30;
const STOP_GRACE_MS = 10_000;

/** Live servers and their dirs, across the process: killed and removed if the process ends abruptly. */
const live = new Map<ChildProcess, string>();
const FATAL_SIGNALS: NodeJS.Signals[] = ['SIGINT', 'SIGTERM', 'SIGHUP'];
function killAll(): void {
  for (const [child, dir] of live) {
    child.kill('SIGKILL');
    rmSync(dir, { recursive: true, force: true });
  }
}
function onFatalSignal(signal: NodeJS.Signals): void {
  killAll();
  if (process.listenerCount(signal) === 1) {
    setHooks(false);
    process.kill(process.pid, signal);
  }
}
function setHooks(on: boolean): void {
  const method = on ? 'on' : 'off';
  process[method]('exit', killAll);
  for (const signal of FATAL_SIGNALS) process[method](signal, onFatalSignal);
}

/** A running server process: its pid, and stop(), which also removes its dir. */
export interface ServerProcess {
  readonly pid: number;
  readonly dir: string;
  readonly logFile: string;
  stop(signal: NodeJS.Signals): Promise<void>;
}

/** The last lines of a log file, for error messages. */
export async function logTail(file: string): Promise<string> {
  const text = await readFile(file, 'utf8').catch(() => '');
  return text.trimEnd().split('\n').slice(-LOG_TAIL_LINES).join('\n');
}

/**
 * Spawns `binary` (output appended to `<dir>/server.log`) and resolves once a line of its output
 * matches `ready`; rejects with the log's tail if it exits first. `dir` is removed by stop(), or
 * when the process ends.
 */
export async function startServer(
  what: string,
  binary: string,
  args: string[],
  dir: string,
  ready: RegExp,
  options: Pick<SpawnOptions, 'uid' | 'gid' | 'env'> = {},
): Promise<ServerProcess> {
  const logFile = path.join(dir, 'server.log');
  const log = createWriteStream(logFile, { flags: 'a' });
  const child = spawn(binary, args, { ...options, cwd: dir, stdio: ['ignore', 'pipe', 'pipe'] });
  if (live.size === 0) setHooks(true);
  live.set(child, dir);
  const exited = new Promise<string>((resolve) => {
    child.once('exit', (code, signal) => resolve(signal ? `killed by ${signal}` : `exited with code ${code}`));
    child.once('error', (err) => resolve(`failed to spawn: ${err.message}`));
  }).then((how) => {
    if (live.delete(child) && live.size === 0) setHooks(false);
    return how;
  });
  let seen: string | undefined = '';
  const isReady = new Promise<void>((resolve) => {
    const scan = (chunk: Buffer): void => {
      log.write(chunk);
      if (seen === undefined) return; // ready already
      seen = (seen + chunk.toString('utf8')).slice(-4096);
      if (ready.test(seen)) {
        seen = undefined;
        resolve();
      }
    };
    for (const stream of [child.stdout!, child.stderr!]) stream.on('data', scan);
  });
  const first = await Promise.race([isReady.then(() => undefined), exited]);
  if (first !== undefined) {
    await new Promise((r) => log.end(r));
    const tail = await logTail(logFile);
    await rm(dir, { recursive: true, force: true });
    throw new ServerStartError(`${what} ${first} before it was ready; the end of its log:\n${tail}`);
  }
  // Unref'd once ready: a test that forgets stop() still lets node exit (the 'exit' hook kills the server).
  child.unref();
  for (const stream of [child.stdout!, child.stderr!]) (stream as unknown as { unref?: () => void }).unref?.();
  return {
    pid: child.pid!,
    dir,
    logFile,
    async stop(signal) {
      if (child.exitCode === null && child.signalCode === null) {
        child.kill('SIGCONT'); // a paused server would never see the stop signal
        child.kill(signal);
        const guard = setTimeout(() => child.kill('SIGKILL'), STOP_GRACE_MS);
        await exited;
        clearTimeout(guard);
      }
      await new Promise((r) => log.end(r));
      await rm(dir, { recursive: true, force: true });
    },
  };
}
