// The command line at par with etcdctl, `consul lock` and flock(1): try-once and conflict codes,
// holder labels (also with etcdctl on the same lock), the whole process group on loss, shell mode and
// --verbose (connection flags: cli-parity-connection.test.ts). Every case drives the built CLI
// (dist/cli/main.js) as a child process against a real etcd. Run `npm run build` first. Every wait
// is on an output line, an exit, or etcd state.
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { mkdtemp, rm, symlink } from 'node:fs/promises';
import { hostname, tmpdir } from 'node:os';
import path from 'node:path';
import type { Client } from '../src/index.js';
import {
  assertNoKeys,
  hasEtcdctl,
  assertOneErrorLine,
  cliFile,
  runCli as start,
  runCliToEnd as run,
  spawnEtcdctl,
  waitFor,
  type CliProc,
} from './helpers.js';

const ROOT = 'test/cli-parity/';

let client: Client;
let endpoint: string;

const { fresh } = cliFile(ROOT, (e, c) => ((client = c), (endpoint = e.endpoints[0]!)));

/** The participant keys of `name` with their values, oldest first. */
async function keysOf(name: string): Promise<{ key: string; value: string }[]> {
  const r = await client.getPrefix(`${name}/`);
  return r.kvs
    .sort((a, b) => (a.createRevision < b.createRevision ? -1 : 1))
    .map((kv) => ({ key: kv.key.toString(), value: kv.value.toString() }));
}

const esc = (s: string): string => s.replace(/[.*+?^${}()|[\]\\/]/g, '\\$&');

/** A holder without a command: resolves with its key once it holds. */
async function holder(name: string, extra: string[] = []): Promise<{ p: CliProc; key: string }> {
  const p = start(['lock', name, '--endpoints', endpoint, ...extra]);
  const key = /^key=(\S+)/.exec(await p.next(/^key=/))![1]!;
  return { p, key };
}

async function release(h: { p: CliProc }): Promise<void> {
  h.p.child.kill('SIGINT');
  assert.equal(await h.p.exited, 0, h.p.stderr());
}

/** Whether process `pid` still runs (a zombie, dead but not yet reaped by its new parent, counts as gone). */
function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch {
    return false;
  }
  try {
    return !/^\d+ \(.*\) Z/s.test(readFileSync(`/proc/${pid}/stat`, 'utf8'));
  } catch {
    return true;
  }
}

describe('try once, and the exit code on conflict', () => {
  test('--try and --timeout 0 give up at once on a held lock, name the holder and its label, and leave no key', async () => {
    const name = fresh('try');
    const h = await holder(name, ['--label', 'batch-host:42']);
    for (const flags of [['--try'], ['--timeout', '0']]) {
      const r = await run(['lock', name, '--endpoints', endpoint, ...flags, '--', 'echo', 'ran']);
      assert.equal(r.code, 4, `${flags.join(' ')}: ${r.stderr}`);
      assert.equal(r.stdout, '', 'the command must not run');
      assertOneErrorLine(
        r.stderr,
        new RegExp(`lock ${esc(name)} is taken \\(held by ${esc(h.key)} batch-host:42, token \\d+\\); not waiting`),
      );
      assert.deepEqual(
        (await keysOf(name)).map((k) => k.key),
        [h.key],
        'the try left its key behind',
      );
    }
    await release(h);
    // Free: it runs the command at once.
    const r = await run(['lock', name, '--endpoints', endpoint, '--try', '--', 'echo', 'ran']);
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.stdout, 'ran\n');
    await assertNoKeys(client, `${name}/`);
  });

  test('--conflict-exit-code sets the status for --try and for an expired --timeout (flock -E), including 0', async () => {
    const name = fresh('conflict-code');
    const h = await holder(name);
    const tried = await run(['lock', name, '--endpoints', endpoint, '--try', '--conflict-exit-code', '75', '--', 'true']);
    assert.equal(tried.code, 75, tried.stderr);
    assertOneErrorLine(tried.stderr, /is taken \(held by/);
    const timed = await run([
      'lock',
      name,
      '--endpoints',
      endpoint,
      '--timeout',
      '200ms',
      '--conflict-exit-code',
      '0',
      '--',
      'echo',
      'ran',
    ]);
    assert.equal(timed.code, 0, timed.stderr);
    assert.equal(timed.stdout, '');
    assertOneErrorLine(timed.stderr, new RegExp(`timed out after 200ms waiting for lock ${esc(name)} \\(held by ${esc(h.key)}`));
    assert.deepEqual(
      (await keysOf(name)).map((k) => k.key),
      [h.key],
    );
    await release(h);
    await assertNoKeys(client, `${name}/`);
  });

  test('--try on a semaphore with no free permit and on a write lock with a reader', async () => {
    const sem = fresh('try-sem');
    const s = await holder(sem, ['--limit', '1']);
    const r1 = await run(['lock', sem, '--endpoints', endpoint, '--limit', '1', '--try', '--', 'true']);
    assert.equal(r1.code, 4, r1.stderr);
    assertOneErrorLine(r1.stderr, new RegExp(`a permit of semaphore ${esc(sem)} is taken \\(held by ${esc(s.key)}`));
    const rw = fresh('try-rw');
    const reader = await holder(rw, ['--read']);
    const r2 = await run(['lock', rw, '--endpoints', endpoint, '--write', '--try', '--', 'true']);
    assert.equal(r2.code, 4, r2.stderr);
    assertOneErrorLine(r2.stderr, /the write lock of .* is taken/);
    // Readers share: a second reader's --try succeeds.
    const r3 = await run(['lock', rw, '--endpoints', endpoint, '--read', '--try', '--', 'true']);
    assert.equal(r3.code, 0, r3.stderr);
    assert.deepEqual(
      (await keysOf(rw)).map((k) => k.key),
      [reader.key],
    );
    await release(s);
    await release(reader);
    await assertNoKeys(client, `${sem}/`);
    await assertNoKeys(client, `${rw}/`);
  });

  test('bad or pointless --conflict-exit-code is refused with exit 2', async () => {
    const cases: [string[], RegExp][] = [
      [['--try', '--conflict-exit-code', '256'], /--conflict-exit-code must be a whole number from 0 to 255, got "256"/],
      [['--try', '--conflict-exit-code', 'x'], /--conflict-exit-code must be a whole number/],
      [['--conflict-exit-code', '3'], /--conflict-exit-code only applies with --try or --timeout/],
      [['-c', 'true', 'echo'], /either with -c or after the lock name/],
      [['--shell'], /--shell needs a command/],
    ];
    for (const [flags, re] of cases) {
      const r = await run(['lock', 'x', '--endpoints', endpoint, ...flags]);
      assert.equal(r.code, 2, `${flags.join(' ')}: ${r.stderr}`);
      assertOneErrorLine(r.stderr, re);
    }
  });
});

describe('holder labels', () => {
  test('the default label is <hostname>:<pid>, --label sets it, and inspect shows it (plain and --json)', async () => {
    const name = fresh('label');
    const a = await holder(name);
    const b = start(['lock', name, '--endpoints', endpoint, '--label', 'deploy by ann', '--', 'true']);
    await waitFor(async () => (await keysOf(name)).length === 2, 'the second to queue');
    assert.deepEqual(
      (await keysOf(name)).map((k) => k.value),
      [`${hostname()}:${a.p.child.pid}`, 'deploy by ann'],
    );
    const plain = await run(['inspect', name, '--endpoints', endpoint]);
    assert.match(plain.stdout, /\bVALUE\b/);
    assert.match(plain.stdout, new RegExp(`^owner .*${esc(`${hostname()}:${a.p.child.pid}`)}$`, 'm'));
    assert.match(plain.stdout, /^#1 .*"deploy by ann"$/m);
    const j = JSON.parse((await run(['inspect', name, '--endpoints', endpoint, '--json'])).stdout) as {
      owner: { label: string };
      waiting: { label: string }[];
    };
    assert.equal(j.owner.label, `${hostname()}:${a.p.child.pid}`);
    assert.equal(j.waiting[0]!.label, 'deploy by ann');
    await release(a);
    assert.equal(await b.exited, 0, b.stderr());
    // --label '' writes no value, as etcdctl and Go's Mutex.
    const none = await holder(name, ['--label', '']);
    assert.deepEqual(await keysOf(name), [{ key: none.key, value: '' }]);
    await release(none);
    await assertNoKeys(client, `${name}/`);
  });

  test('a semaphore keeps its permit count first ("<n> <label>"): inspect shows the label, a different count is still refused', async () => {
    const name = fresh('label-sem');
    const a = await holder(name, ['--limit', '2', '--label', 'worker-a']);
    const b = await holder(name, ['--limit', '2']);
    assert.deepEqual(
      (await keysOf(name)).map((k) => k.value),
      ['2 worker-a', `2 ${hostname()}:${b.p.child.pid}`],
    );
    const j = JSON.parse((await run(['inspect', name, '--endpoints', endpoint, '--json'])).stdout) as {
      kind: string;
      permits: number;
      holders: { label: string }[];
    };
    assert.equal(j.kind, 'semaphore');
    assert.equal(j.permits, 2);
    assert.deepEqual(
      j.holders.map((p) => p.label),
      ['worker-a', `${hostname()}:${b.p.child.pid}`],
    );
    const plain = await run(['inspect', name, '--endpoints', endpoint]);
    assert.match(plain.stdout, /semaphore, 2 of 2 permits held/);
    assert.match(plain.stdout, /^permit .* worker-a$/m);
    const other = await run(['lock', name, '--endpoints', endpoint, '--limit', '3', '--label', 'x', '--', 'true']);
    assert.equal(other.code, 1, other.stderr);
    assert.match(other.stderr, /asked for with 3 permits, but \S+ uses it with 2 permits/);
    await release(a);
    await release(b);
    await assertNoKeys(client, `${name}/`);
  });

  test('etcdctl lock and a labelled holder exclude each other both ways', {
    skip: !hasEtcdctl() && 'etcdctl is not installed',
  }, async () => {
    const name = fresh('label-etcdctl');
    const ours = await holder(name, ['--label', 'ours']);
    const ctl = spawnEtcdctl(endpoint, ['lock', name]);
    await waitFor(async () => (await keysOf(name)).length === 2, 'etcdctl to queue');
    assert.deepEqual(
      (await keysOf(name)).map((k) => k.value),
      ['ours', ''],
      'etcdctl writes an empty value, ours a label',
    );
    assert.equal(ctl.stdout(), '', 'etcdctl must not get the lock while we hold it');
    await release(ours);
    const ctlKey = await ctl.line(new RegExp(`^${esc(name)}/`));
    const waiter = start(['lock', name, '--endpoints', endpoint, '--label', 'second', '--', 'sh', '-c', 'echo "ran $ETCD_LOCK_KEY"']);
    await waitFor(async () => (await keysOf(name)).length === 2, 'ours to queue');
    assert.deepEqual(await keysOf(name), [
      { key: ctlKey, value: '' },
      { key: (await keysOf(name))[1]!.key, value: 'second' },
    ]);
    assert.equal(waiter.stdout(), '', 'ours must not run while etcdctl holds');
    await ctl.kill();
    await waiter.next(/^ran /);
    assert.equal(await waiter.exited, 0, waiter.stderr());
    await assertNoKeys(client, `${name}/`);
    // etcdctl leaves its lease to expire: revoke it (ours were revoked by the CLI).
    await Promise.all((await client.leaseLeases()).map((l) => client.leaseRevoke(l)));
  });
});

describe('the process group', () => {
  /** A shell script that starts a grandchild, prints its pid, and waits. */
  const script = (grandchild: string): string => `${grandchild} & echo "grandchild $!"; wait`;

  test('lock lost: SIGTERM reaches the script and its own child (the whole group), exit 3', async () => {
    const name = fresh('group-lost');
    const p = start(['lock', name, '--endpoints', endpoint, '-c', script('sleep 1000')]);
    const pid = Number(/(\d+)$/.exec(await p.next(/^grandchild \d+$/))![1]);
    assert.ok(alive(pid));
    const [k] = await keysOf(name);
    await client.delete(k!.key);
    assert.equal(await p.exited, 3);
    assertOneErrorLine(p.stderr(), /lock lost while the command ran: .*sent SIGTERM to the command's process group/);
    // A hang guard, not a timing: without the group signal the grandchild lives for 1000 s.
    await waitFor(() => !alive(pid), `grandchild ${pid} to die`, { limitMs: 10_000 });
    await assertNoKeys(client, `${name}/`);
  });

  test('lock lost: a grandchild that ignores SIGTERM is SIGKILLed after --kill-grace, before we exit', async () => {
    const name = fresh('group-kill');
    const p = start([
      'lock',
      name,
      '--endpoints',
      endpoint,
      '--kill-grace',
      '1s',
      '-c',
      script(`sh -c 'trap "" TERM; echo armed; while :; do sleep 1; done'`),
    ]);
    // Two shells print these, in either order: take both lines as they come.
    const lines = [await p.next(/^(grandchild \d+|armed)$/), await p.next(/^(grandchild \d+|armed)$/)];
    const pid = Number(/^grandchild (\d+)$/.exec(lines.find((l) => l !== 'armed') ?? '')![1]);
    assert.ok(lines.includes('armed'), lines.join(' | '));
    const [k] = await keysOf(name);
    await client.delete(k!.key);
    assert.equal(await p.exited, 3);
    assertOneErrorLine(p.stderr(), /SIGKILL follows in 1s/);
    await waitFor(() => !alive(pid), `grandchild ${pid} to die`, { limitMs: 10_000 });
    await assertNoKeys(client, `${name}/`);
  });

  test('SIGTERM to the CLI is forwarded to the whole group; the lock is released after', async () => {
    const name = fresh('group-forward');
    const p = start(['lock', name, '--endpoints', endpoint, '-c', script('sleep 1000')]);
    const pid = Number(/(\d+)$/.exec(await p.next(/^grandchild \d+$/))![1]);
    p.child.kill('SIGTERM');
    assert.equal(await p.exited, 143);
    await waitFor(() => !alive(pid), `grandchild ${pid} to die`, { limitMs: 10_000 });
    await assertNoKeys(client, `${name}/`);
  });
});

describe('shell mode and --verbose', () => {
  test('-c and --shell run through $SHELL -c (default /bin/sh), with the lock environment', async () => {
    const dir = await mkdtemp(path.join(tmpdir(), 'cli-shell-'));
    try {
      const shell = path.join(dir, 'my-shell');
      await symlink('/bin/sh', shell);
      const name = fresh('shell');
      const c = await run(['lock', name, '--endpoints', endpoint, '-c', 'echo "$0 $ETCD_LOCK_KEY $ETCD_LOCK_REV" | tr a-z A-Z'], {
        SHELL: shell,
      });
      assert.equal(c.code, 0, c.stderr);
      assert.match(c.stdout, new RegExp(`^${esc(shell.toUpperCase())} ${esc(name.toUpperCase())}/[0-9A-F]+ \\d+\\n$`));
      const s = await run(['lock', name, '--endpoints', endpoint, '--shell', '--', 'echo', '$0', '&&', 'exit', '7'], { SHELL: '' });
      assert.equal(s.code, 7, s.stderr);
      assert.equal(s.stdout, '/bin/sh\n');
      await assertNoKeys(client, `${name}/`);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  test('--verbose tells when it queued, whom it waits behind, when it acquired (token, time) and released', async () => {
    const name = fresh('verbose');
    const h = await holder(name, ['--label', 'first']);
    const p = start(['lock', name, '--endpoints', endpoint, '--verbose', '--label', 'second', '--', 'echo', 'working']);
    assert.match(await p.next(/^etcd-concurrency: connected /, 'stderr'), /connected to .* session lease [0-9a-f]+, TTL 30s$/);
    const queued = await p.next(/^etcd-concurrency: queued /, 'stderr');
    const m = new RegExp(
      `^etcd-concurrency: queued as (${esc(name)}/[0-9a-f]+) with token (\\d+) behind ${esc(h.key)} \\(first\\), the holder$`,
    ).exec(queued);
    assert.ok(m, queued);
    assert.equal(p.stdout(), '');
    await release(h);
    const acquired = await p.next(/^etcd-concurrency: acquired /, 'stderr');
    assert.match(acquired, new RegExp(`^etcd-concurrency: acquired ${esc(m[1]!)} with token ${m[2]} after \\d+\\.\\d{3}s$`));
    await p.next(/^working$/);
    assert.equal(await p.next(/^etcd-concurrency: released /, 'stderr'), `etcd-concurrency: released ${m[1]}`);
    assert.equal(await p.exited, 0);
    // Free lock: nobody ahead.
    const free = await run(['lock', name, '--endpoints', endpoint, '--verbose', '--', 'true']);
    assert.match(free.stderr, /queued as \S+ with token \d+: nobody ahead\n.*acquired /);
    await assertNoKeys(client, `${name}/`);
  });
});
