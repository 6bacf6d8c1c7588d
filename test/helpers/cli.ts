// The built CLI as a child process: its output awaited line by line, its exit, leftovers killed.
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { existsSync } from 'node:fs';
import { constants } from 'node:os';
import { before } from 'node:test';
import { fileURLToPath } from 'node:url';
import type { Client } from '../../src/index.js';
import type { EtcdCluster } from '../../src/testing/index.js';
import { etcdForFile } from './etcd.js';
import { killEtcdctls } from './etcdctl.js';

/** The built `etcd-concurrency` CLI: `npm run build` first. */
export const CLI_MAIN = fileURLToPath(new URL('../../dist/cli/main.js', import.meta.url));

/**
 * Starts the built CLI with `args`, stdout and stderr piped (stdin too with `stdin: true`). The
 * caller's ETCDCTL_* variables are left out, so that they never leak into a test: each test says
 * what it means, in `args` or in `env`.
 */
export function spawnCli(args: string[], options: { env?: NodeJS.ProcessEnv; stdin?: boolean } = {}): ChildProcess {
  const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('ETCDCTL_')));
  return spawn(process.execPath, [CLI_MAIN, ...args], {
    env: { ...env, ...options.env },
    stdio: [options.stdin ? 'pipe' : 'ignore', 'pipe', 'pipe'],
  });
}

/** A CLI child started by {@link runCli}: its output is collected and can be awaited line by line, in order. */
export interface CliProc {
  readonly child: ChildProcess;
  /** Everything printed on stdout so far. */
  stdout(): string;
  /** Everything printed on stderr so far. */
  stderr(): string;
  /** stdout and stderr together, in the order their chunks arrived. */
  output(): string;
  /**
   * The next line of `stream` (after those already taken from it by `next` or `match`) that matches
   * `re`; rejects if the child ends first. Calls on one stream are served in the order they are made.
   */
  next(re: RegExp, stream?: 'stdout' | 'stderr'): Promise<string>;
  /** The same as `next`, resolving with the match instead of the line. */
  match(re: RegExp, stream?: 'stdout' | 'stderr'): Promise<RegExpExecArray>;
  /** Exit code, or 128 + n for a death by signal n (as a shell reports it). */
  readonly exited: Promise<number>;
  /** Sends `sig`, without waiting. */
  signal(sig: NodeJS.Signals): void;
  /** Sends `sig` (SIGTERM) if the child still runs; resolves with `exited`. */
  kill(sig?: NodeJS.Signals): Promise<number>;
}

/** The children of runCli that have not ended yet (for killClis). */
const clis = new Set<CliProc>();

/**
 * Starts the built CLI with `args` (through spawnCli, so `env` and `stdin` mean the same) and
 * collects its output. The child has ended (`exited` resolves, `next` stops waiting) on its 'close'
 * event, once its pipes are closed too; `exitEvent: 'exit'` ends it when the process exits, for a
 * child that may leave a process behind holding its pipes (a command under `lock -- cmd` whose lock
 * process was SIGKILLed). Every child is registered until it ends, so that killClis can end leftovers.
 */
export function runCli(args: string[], options: { env?: NodeJS.ProcessEnv; stdin?: boolean; exitEvent?: 'close' | 'exit' } = {}): CliProc {
  const child = spawnCli(args, options);
  const text = { stdout: '', stderr: '' };
  let all = '';
  const taken = { stdout: 0, stderr: 0 }; // complete lines already returned by next() or match()
  let ended = false;
  type Waiter = { re: RegExp; resolve: (m: RegExpExecArray) => void; reject: (e: Error) => void };
  const waiters: Record<'stdout' | 'stderr', Waiter[]> = { stdout: [], stderr: [] };
  const check = (stream: 'stdout' | 'stderr'): void => {
    const lines = text[stream].split('\n');
    if (!ended) lines.pop(); // only complete lines, unless the child has ended
    const queue = waiters[stream];
    while (queue.length > 0) {
      const w = queue[0]!;
      let hit: RegExpExecArray | null = null;
      let i = taken[stream];
      for (; i < lines.length && !hit; i++) hit = w.re.exec(lines[i]!);
      if (hit) {
        taken[stream] = i;
        w.resolve(hit);
      } else if (ended) {
        w.reject(new Error(`exited before printing ${w.re} on ${stream}; stdout: ${text.stdout}; stderr: ${text.stderr}`));
      } else return;
      queue.shift();
    }
  };
  for (const stream of ['stdout', 'stderr'] as const) {
    child[stream]!.setEncoding('utf8').on('data', (d: string) => {
      text[stream] += d;
      all += d;
      check(stream);
    });
  }
  const exited = once(child, options.exitEvent ?? 'close').then((a) => {
    const [code, sig] = a as [number | null, NodeJS.Signals | null];
    ended = true;
    check('stdout');
    check('stderr');
    clis.delete(p);
    return code ?? 128 + constants.signals[sig!];
  });
  const match = (re: RegExp, stream: 'stdout' | 'stderr' = 'stdout'): Promise<RegExpExecArray> =>
    new Promise((resolve, reject) => {
      waiters[stream].push({ re, resolve, reject });
      check(stream);
    });
  const p: CliProc = {
    child,
    stdout: () => text.stdout,
    stderr: () => text.stderr,
    output: () => all,
    next: async (re, stream) => (await match(re, stream)).input,
    match,
    exited,
    signal: (sig) => child.kill(sig),
    kill(sig = 'SIGTERM') {
      if (child.exitCode === null && child.signalCode === null) child.kill(sig);
      return exited;
    },
  };
  clis.add(p);
  return p;
}

/** Runs the CLI to its end: its exit code (as {@link CliProc.exited}), stdout and stderr. */
export async function runCliToEnd(args: string[], env?: NodeJS.ProcessEnv): Promise<{ code: number; stdout: string; stderr: string }> {
  const p = runCli(args, { env });
  const code = await p.exited;
  return { code, stdout: p.stdout(), stderr: p.stderr() };
}

/**
 * Ends every child of runCli still running (for `after`): `signal` (SIGKILL) to each, and with
 * `killAfterMs`, SIGKILL to those still running that long after. Resolves once all have ended.
 */
export async function killClis(signal: NodeJS.Signals = 'SIGKILL', killAfterMs?: number): Promise<void> {
  const guard = killAfterMs === undefined ? undefined : setTimeout(() => [...clis].forEach((p) => p.child.kill('SIGKILL')), killAfterMs);
  try {
    await Promise.all([...clis].map((p) => p.kill(signal)));
  } finally {
    clearTimeout(guard);
  }
}

/** The CLI's stderr is exactly one `etcd-concurrency: ...` line (no stack trace), and that line matches `re`. */
export function assertOneErrorLine(stderr: string, re: RegExp): void {
  const lines = stderr.trimEnd().split('\n');
  assert.equal(lines.length, 1, `expected one line on stderr, got: ${stderr}`);
  assert.match(lines[0]!, /^etcd-concurrency: /);
  assert.match(lines[0]!, re);
}

/**
 * etcdForFile for a file that runs the built CLI: first checks that it is built; after the tests,
 * `beforeChecks`, then every child of runCli and every etcdctl still running is killed (SIGKILL),
 * then the checks of etcdForFile.
 */
export function etcdForCliFile(
  root: string,
  ready: (etcd: EtcdCluster, client: Client) => void,
  options: { beforeChecks?: () => Promise<void> } = {},
): (scope: string) => string {
  before(() => assert.ok(existsSync(CLI_MAIN), `${CLI_MAIN} is missing: run \`npm run build\` first`));
  return etcdForFile(root, ready, {
    beforeChecks: async () => {
      await options.beforeChecks?.();
      await killClis();
      await killEtcdctls();
    },
  });
}

/** What {@link cliFile} gives a CLI test file. */
export interface CliFile {
  /** A lock or election name no other test uses. */
  fresh(scope: string): string;
  /** The participant keys of `name`, oldest first. */
  keysOf(name: string): Promise<string[]>;
}

/** {@link etcdForCliFile}, with a name for each test and a reader of a name's queue. */
export function cliFile(
  root: string,
  ready: (etcd: EtcdCluster, client: Client) => void,
  options: { beforeChecks?: () => Promise<void> } = {},
): CliFile {
  let client: Client | undefined;
  const prefix = etcdForCliFile(
    root,
    (e, c) => {
      client = c;
      ready(e, c);
    },
    options,
  );
  return {
    fresh: (scope) => `${prefix(scope)}n`,
    async keysOf(name) {
      const r = await client!.getPrefix(`${name}/`);
      return r.kvs.sort((a, b) => (a.createRevision < b.createRevision ? -1 : 1)).map((kv) => kv.key.toString());
    },
  };
}
