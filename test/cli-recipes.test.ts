// The CLI's semaphore (`lock --limit N`) and readers-writer lock (`lock --read/--write`), and what
// `inspect` shows of them, against a real etcd. Holders are CLI processes without a command: they
// print their key and hold until interrupted, so every step waits on a printed line or an exit.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { once } from 'node:events';
import type { ChildProcess } from 'node:child_process';
import { type Client, Semaphore, Session } from '../src/index.js';
import type { EtcdCluster } from '../src/testing/index.js';
import { etcdForFile, spawnCli } from './helpers.js';

const ROOT = 'test/cli-recipes/';
let etcd: EtcdCluster;
let client: Client;
const fresh = etcdForFile(ROOT, (e, c) => ((etcd = e), (client = c)));

/** A CLI process: its output so far, the first stdout line matching a pattern, its exit code. */
class Cli {
  readonly child: ChildProcess;
  out = '';
  err = '';
  readonly exited: Promise<number | null>;
  constructor(args: string[]) {
    this.child = spawnCli(['--endpoints', etcd.endpoints[0]!, ...args]);
    this.child.stdout!.setEncoding('utf8').on('data', (d: string) => (this.out += d));
    this.child.stderr!.setEncoding('utf8').on('data', (d: string) => (this.err += d));
    this.exited = once(this.child, 'close').then(([code]) => code as number | null);
  }
  /** The first stdout line matching `re`; rejects if the process exits first. */
  async line(re: RegExp): Promise<string> {
    for (;;) {
      const hit = this.out.split('\n').find((l) => re.test(l));
      if (hit) return hit;
      const data = once(this.child.stdout!, 'data').then(() => 'data' as const);
      const r = await Promise.race([data, this.exited.then(() => 'exit' as const)]);
      if (r === 'exit') {
        const last = this.out.split('\n').find((l) => re.test(l));
        if (last) return last;
        throw new Error(`exited before printing ${re}; stdout: ${this.out}; stderr: ${this.err}`);
      }
    }
  }
  /** Interrupt (the holder releases and exits 0) and wait. */
  async stop(): Promise<number | null> {
    if (this.child.exitCode === null) this.child.kill('SIGINT');
    return this.exited;
  }
}

async function run(args: string[]): Promise<{ code: number | null; out: string; err: string }> {
  const c = new Cli(args);
  const code = await c.exited;
  return { code, out: c.out, err: c.err };
}

describe('lock --limit N: a semaphore', () => {
  it('N holders at once; the next one times out naming the holders (exit 4), then gets a permit when one leaves', {
    timeout: 60_000,
  }, async () => {
    const name = `${fresh('sem')}jobs`;
    const a = new Cli(['lock', '--limit', '2', name]);
    const b = new Cli(['lock', '--limit', '2', name]);
    try {
      const [ka, kb] = [await a.line(/^key=/), await b.line(/^key=/)];
      const timedOut = await run(['lock', '--limit', '2', name, '--timeout', '1s', '--', 'true']);
      assert.equal(timedOut.code, 4, timedOut.err);
      assert.match(timedOut.err, /timed out after 1s waiting for a permit of semaphore .* \(held by /);
      for (const k of [ka, kb]) assert.ok(timedOut.err.includes(/key=(\S+)/.exec(k)![1]!), timedOut.err);

      const inspect = JSON.parse((await run(['inspect', name, '--json'])).out) as {
        kind: string;
        permits: number;
        holders: unknown[];
        waiting: unknown[];
      };
      assert.equal(inspect.kind, 'semaphore');
      assert.equal(inspect.permits, 2);
      assert.equal(inspect.holders.length, 2);
      assert.equal(inspect.waiting.length, 0);

      const c = new Cli(['lock', '--limit', '2', name, '--', 'sh', '-c', 'echo "token=$ETCD_LOCK_REV"']);
      // c queues: wait until its key is in etcd, then free a permit.
      await waitForKeys(`${name}/`, 3);
      assert.equal(await a.stop(), 0);
      assert.match(await c.line(/^token=\d+$/), /^token=\d+$/);
      assert.equal(await c.exited, 0, c.err);
    } finally {
      await Promise.all([a.stop(), b.stop()]);
    }
  });

  it('another permit count on the same name is refused with a clear message, leaving the holder alone', { timeout: 60_000 }, async () => {
    const name = `${fresh('conflict')}jobs`;
    const a = new Cli(['lock', '--limit', '2', name]);
    try {
      await a.line(/^key=/);
      const r = await run(['lock', '--limit', '3', name, '--', 'true']);
      assert.equal(r.code, 1, r.err);
      assert.match(r.err, /uses it with 2 permits; every participant must pass the same permit count/);
      assert.equal((await client.range({ key: Buffer.from(`${name}/`), rangeEnd: Buffer.from(`${name}0`), countOnly: true })).count, 1n);
    } finally {
      await a.stop();
    }
  });

  it('bad --limit values and exclusive options are usage errors (exit 2)', { timeout: 30_000 }, async () => {
    for (const args of [
      ['--limit', '0'],
      ['--limit', '61'],
      ['--limit', 'x'],
      ['--read', '--write'],
      ['--limit', '2', '--read'],
    ]) {
      const r = await run(['lock', 'locks/x', ...args, '--', 'true']);
      assert.equal(r.code, 2, `${args.join(' ')}: ${r.err}`);
      assert.match(r.err, /--limit must be a whole number from 1 to 60|exclude each other/);
    }
  });

  it('a library semaphore and the CLI share permits', { timeout: 60_000 }, async () => {
    const name = `${fresh('mixed')}jobs`;
    const s = await Session.create(client, { ttl: 10 });
    try {
      const permit = await new Semaphore(s, name, { permits: 1 }).acquire();
      const r = await run(['lock', '--limit', '1', name, '--timeout', '1s', '--', 'true']);
      assert.equal(r.code, 4, r.err);
      await permit.release();
      const ok = await run(['lock', '--limit', '1', name, '--', 'true']);
      assert.equal(ok.code, 0, ok.err);
    } finally {
      await s.close();
    }
  });
});

describe('lock --read / --write: a readers-writer lock', () => {
  it('readers share; a writer waits for them; inspect shows the readers', { timeout: 60_000 }, async () => {
    const name = `${fresh('rw')}config`;
    const r1 = new Cli(['lock', '--read', name]);
    const r2 = new Cli(['lock', '--read', name]);
    try {
      await r1.line(/^key=.*\/read\//);
      await r2.line(/^key=.*\/read\//);
      const w = await run(['lock', '--write', name, '--timeout', '1s', '--', 'true']);
      assert.equal(w.code, 4, w.err);
      assert.match(w.err, /timed out after 1s waiting for the write lock of .* \(oldest holder .*\/read\//);
      const snap = JSON.parse((await run(['inspect', name, '--json'])).out) as { kind: string; holders: { mode: string }[] };
      assert.equal(snap.kind, 'rwlock');
      assert.deepEqual(
        snap.holders.map((h) => h.mode),
        ['read', 'read'],
      );
      const text = (await run(['inspect', name])).out;
      assert.match(text, /read-locked by 2 readers/);

      const writer = new Cli(['lock', '--write', name, '--', 'sh', '-c', 'echo "key=$ETCD_LOCK_KEY"']);
      await waitForKeys(`${name}/`, 3);
      await Promise.all([r1.stop(), r2.stop()]);
      assert.match(await writer.line(/^key=/), /\/write\//);
      assert.equal(await writer.exited, 0, writer.err);
    } finally {
      await Promise.all([r1.stop(), r2.stop()]);
    }
  });
});

/** Waits until `n` keys exist under `prefix` (a queued CLI process has enqueued). */
async function waitForKeys(prefix: string, n: number): Promise<void> {
  const key = Buffer.from(prefix);
  const w = client.watch(key, { prefix: true });
  try {
    await w.created;
    const count = async () => (await client.range({ key, rangeEnd: Buffer.from(`${prefix.slice(0, -1)}0`), countOnly: true })).count;
    if ((await count()) >= BigInt(n)) return;
    for await (const _ of w) if ((await count()) >= BigInt(n)) return;
  } finally {
    w.cancel();
  }
}
