// Worker processes of the multi-process phases (bench/locks.ts, bench/sessions-scale.ts): each
// speaks in lines, prints "ready" once set up, then answers each command line with one JSON line.
import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { once } from 'node:events';
import { readFile } from 'node:fs/promises';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';

const BENCH = fileURLToPath(new URL('.', import.meta.url));

export class LineWorker {
  private readonly lines: string[] = [];
  private waiter: (() => void) | undefined;
  private stderr = '';
  private exited: string | undefined;
  readonly pid: number;

  private constructor(
    readonly what: string,
    private readonly child: ChildProcessWithoutNullStreams,
  ) {
    this.pid = child.pid ?? -1;
    child.stderr.setEncoding('utf8').on('data', (d: string) => (this.stderr = (this.stderr + d).slice(-4000)));
    createInterface({ input: child.stdout }).on('line', (l) => {
      this.lines.push(l);
      this.waiter?.();
    });
    child.on('close', (code, signal) => {
      this.exited = `exited ${code ?? signal}`;
      this.waiter?.();
    });
  }

  /** A bench/*.ts worker run by node with tsx (as the bench itself is). */
  static node(script: string, args: string[]): LineWorker {
    return new LineWorker(
      script,
      spawn(process.execPath, ['--import', 'tsx', `${BENCH}${script}`, ...args], { stdio: ['pipe', 'pipe', 'pipe'] }),
    );
  }

  /** The interop/go binary in one of its modes. */
  static go(bin: string, args: string[]): LineWorker {
    return new LineWorker(
      `go-interop ${args.find((a) => !a.startsWith('-')) ?? ''}`,
      spawn(bin, args, { stdio: ['pipe', 'pipe', 'pipe'] }),
    );
  }

  /** The next line printed, within `ms` (a hang guard), or an error with the worker's stderr. */
  async line(ms: number): Promise<string> {
    const deadline = performance.now() + ms;
    while (this.lines.length === 0) {
      if (this.exited) throw new Error(`bench: ${this.what} ${this.exited}: ${this.stderr.trim()}`);
      const left = deadline - performance.now();
      if (left <= 0) throw new Error(`bench: ${this.what} printed nothing within ${ms} ms: ${this.stderr.trim()}`);
      await new Promise<void>((resolve) => {
        const t = setTimeout(resolve, left);
        this.waiter = () => {
          clearTimeout(t);
          resolve();
        };
      });
      this.waiter = undefined;
    }
    return this.lines.shift()!;
  }

  async ready(ms = 60_000): Promise<void> {
    const l = await this.line(ms);
    if (l !== 'ready') throw new Error(`bench: ${this.what} said ${JSON.stringify(l)} instead of ready: ${this.stderr.trim()}`);
  }

  send(line: string): void {
    this.child.stdin.write(`${line}\n`);
  }

  async json<T>(ms: number): Promise<T> {
    const l = await this.line(ms);
    try {
      return JSON.parse(l) as T;
    } catch {
      throw new Error(`bench: ${this.what} printed ${l.slice(0, 200)} instead of JSON: ${this.stderr.trim()}`);
    }
  }

  /** Ends stdin (the worker's cue to close its sessions) and waits for the exit; kills it after `ms`. */
  async close(ms = 30_000): Promise<void> {
    if (this.exited) return;
    const closed = once(this.child, 'close');
    this.child.stdin.end();
    const t = setTimeout(() => this.child.kill('SIGKILL'), ms);
    try {
      await closed;
    } finally {
      clearTimeout(t);
    }
  }

  kill(): void {
    if (!this.exited) this.child.kill('SIGKILL');
  }
}

/** CPU time (user + system) of process `pid` so far, in ms, from /proc (Linux); NaN elsewhere. */
export async function processCpuMs(pid: number): Promise<number> {
  try {
    const stat = await readFile(`/proc/${pid}/stat`, 'utf8');
    // Fields after the command (which may hold spaces), from field 3: utime and stime are 14 and 15.
    const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return ((Number(f[11]) + Number(f[12])) * 1000) / CLOCK_TICKS;
  } catch {
    return NaN;
  }
}

/** USER_HZ: 100 on every Linux architecture Node runs on. */
const CLOCK_TICKS = 100;
