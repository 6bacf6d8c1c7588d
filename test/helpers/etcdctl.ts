// etcdctl (v3 API) as a child process, for tests that run it against our locks and elections.
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';

const installed = new Map<string, boolean>();

/** Whether `etcdctl` (v3 API) runs here (asked once), for a test's `skip`. */
export function hasEtcdctl(): boolean {
  if (!installed.has('etcdctl'))
    installed.set('etcdctl', spawnSync('etcdctl', ['version'], { env: { ...process.env, ETCDCTL_API: '3' } }).status === 0);
  return installed.get('etcdctl')!;
}

/** An `etcdctl` child (v3 API) whose output is collected and can be awaited line by line. */
export interface Etcdctl {
  readonly child: ChildProcess;
  /** Everything printed on stdout so far. */
  stdout(): string;
  stderr(): string;
  /** Resolves with the first stdout line matching `re` (immediately if already printed). */
  line(re: RegExp): Promise<string>;
  /** Resolves with the exit code (or the signal name). */
  readonly exited: Promise<number | string>;
  /** Kills the child (SIGTERM) if still running and waits for it to exit. */
  kill(): Promise<void>;
}

const children = new Set<Etcdctl>();

export function spawnEtcdctl(endpoint: string, args: string[]): Etcdctl {
  const child = spawn('etcdctl', [`--endpoints=${endpoint}`, ...args], {
    env: { ...process.env, ETCDCTL_API: '3' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  let err = '';
  const waiters: { re: RegExp; resolve: (l: string) => void }[] = [];
  const check = (final = false): void => {
    const lines = out.split('\n');
    if (!final) lines.pop(); // only complete lines, unless the child has exited
    for (const w of [...waiters]) {
      const hit = lines.find((l) => w.re.test(l));
      if (hit !== undefined) {
        waiters.splice(waiters.indexOf(w), 1);
        w.resolve(hit);
      }
    }
  };
  child.stdout!.setEncoding('utf8').on('data', (d: string) => {
    out += d;
    check();
  });
  child.stderr!.setEncoding('utf8').on('data', (d: string) => (err += d));
  const exited = once(child, 'close').then(([code, signal]) => (code ?? signal) as number | string);
  const ctl: Etcdctl = {
    child,
    stdout: () => out,
    stderr: () => err,
    line(re) {
      return new Promise((resolve, reject) => {
        waiters.push({ re, resolve });
        check();
        void exited.then(() => {
          check(true);
          const i = waiters.findIndex((w) => w.re === re);
          if (i >= 0) {
            waiters.splice(i, 1);
            reject(new Error(`etcdctl exited before printing ${re}; stdout: ${out}; stderr: ${err}`));
          }
        });
      });
    },
    exited,
    async kill() {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
      await exited;
      children.delete(ctl);
    },
  };
  children.add(ctl);
  void exited.then(() => children.delete(ctl));
  return ctl;
}

/** Kills every etcdctl child still running (for `after`). */
export async function killEtcdctls(): Promise<void> {
  await Promise.all([...children].map((c) => c.kill()));
}
