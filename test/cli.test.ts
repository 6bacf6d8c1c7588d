// The built `etcd-concurrency` CLI (dist/cli/main.js), run as a child process against a real etcd,
// and against etcdctl on the same names. Run `npm run build` first. Every wait is on a child's
// output line, its exit, or etcd state; never on a sleep.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { rm } from 'node:fs/promises';
import path from 'node:path';
import { setTimeout as delay } from 'node:timers/promises';
import { Client } from '../src/index.js';
import { startEtcd, type EtcdCluster } from '../src/testing/index.js';
import { assertNoKeys, hasEtcdctl, hasOpenssl, assertNoLeases, assertOneErrorLine, etcdForCliFile, runCli as start, runCliToEnd as run, spawnEtcdctl, waitFor, closedPort, testCerts, type CliProc } from './helpers.js';

const ROOT = 'test/cli/';

let client: Client;
let endpoint: string;

const prefix = etcdForCliFile(ROOT, (e, c) => ((client = c), (endpoint = e.endpoints[0]!)));

/** A lock or election name no other test uses. */
const fresh = (scope: string): string => `${prefix(scope)}n`;

/** The participant keys of `name`, oldest first. */
async function keysOf(name: string): Promise<string[]> {
  const r = await client.getPrefix(`${name}/`);
  return r.kvs.sort((a, b) => (a.createRevision < b.createRevision ? -1 : 1)).map((kv) => kv.key.toString());
}


/**
 * `p`'s value, or `what` if it has not settled within `ms`: a hang guard, so that a behaviour that
 * never comes fails the test instead of hanging it. Its timer is cancelled either way.
 */
async function unlessAfter<T>(p: Promise<T>, ms: number, what: string): Promise<T | string> {
  const ac = new AbortController();
  try {
    return await Promise.race([p, delay(ms, what, { signal: ac.signal })]);
  } finally {
    ac.abort();
  }
}

/** `node -e <script>` as a command for `lock -- ...`. */
const nodeCmd = (script: string): string[] => [process.execPath, '-e', script];

/** A child that prints its lock env and "ready", then exits with the code written to its stdin. */
const ECHO_ENV_THEN_WAIT = nodeCmd(
  `console.log('env key=' + process.env.ETCD_LOCK_KEY + ' rev=' + process.env.ETCD_LOCK_REV); console.log('ready');` +
    `process.stdin.on('data', (d) => process.exit(Number(String(d).trim())));`,
);

/** A child that reports the signals it gets; on SIGTERM it exits with 42. */
const TRAP_SIGNALS = nodeCmd(
  `for (const s of ['SIGINT', 'SIGTERM']) process.on(s, () => { console.log('child got ' + s); if (s === 'SIGTERM') process.exit(42); });` +
    `console.log('ready'); setInterval(() => {}, 1000);`,
);

describe('help, version and usage errors', () => {
  test('--help works globally and for every command, and --version prints the version', async () => {
    const global = await run(['--help']);
    assert.equal(global.code, 0);
    assert.match(global.stdout, /^Usage: etcd-concurrency <command>/);
    assert.match(global.stdout, /Exit status:/);
    await Promise.all(
      ['lock', 'elect', 'inspect', 'dev'].map(async (cmd) => {
        const [r, h] = await Promise.all([run([cmd, '--help']), run(['help', cmd])]);
        assert.equal(r.code, 0, r.stderr);
        assert.match(r.stdout, new RegExp(`^Usage: etcd-concurrency ${cmd}`));
        assert.equal(r.stderr, '');
        assert.equal(h.stdout, r.stdout);
      }),
    );
    const v = await run(['--version']);
    assert.equal(v.code, 0);
    assert.match(v.stdout.trim(), /^\d+\.\d+\.\d+/);
  });

  test('bad input exits 2 with one clear line', async () => {
    const cases: [string[], RegExp][] = [
      [['lock', ''], /lock name is empty/],
      [['lock'], /missing the lock name/],
      [['lock', 'x/'], /ends with "\/"/],
      [['lock', 'x', '--ttl', 'abc'], /--ttl must be a whole number of seconds/],
      [['lock', 'x', '--ttl', '0'], /--ttl must be a whole number/],
      [['lock', 'x', '--timeout', 'soon'], /--timeout must be a duration/],
      [['lock', 'x', '--'], /nothing to run after --/],
      [['lock', 'x', '--frobnicate'], /unknown option --frobnicate/],
      [['elect', 'x'], /missing the proposal/],
      [['elect', '', 'p'], /election name is empty/],
      [['elect', 'x', 'p', '--ttl', '-1'], /--ttl/],
      [['inspect'], /missing the name/],
      [['dev', '--members', '2'], /--members must be 1 or 3/],
      [['frobnicate'], /unknown command "frobnicate"/],
      [['lock', 'x', '--user', 'root'], /--user has no password/],
    ];
    await Promise.all(
      cases.map(async ([args, re]) => {
        const r = await run(args);
        assert.equal(r.code, 2, `${args.join(' ')}: ${r.stderr}`);
        assertOneErrorLine(r.stderr, re);
      }),
    );
    const none = await run([]);
    assert.equal(none.code, 2);
    assert.match(none.stderr, /^Usage:/);
  });

  test('an unreachable endpoint fails at once with a hint to run `dev` or pass --endpoints', async () => {
    const port = await closedPort();
    for (const [args, env] of [
      [['lock', 'x', '--endpoints', `127.0.0.1:${port}`], {}],
      [['inspect', 'x'], { ETCDCTL_ENDPOINTS: `127.0.0.1:${port}` }],
      [['elect', '-l', 'x', `--endpoints=127.0.0.1:${port}`], {}],
      // Options before the command word, as etcdctl allows.
      [['--endpoints', `127.0.0.1:${port}`, '--dial-timeout', '1s', 'lock', 'x'], {}],
    ] as const) {
      const r = await run([...args], env);
      assert.equal(r.code, 1, r.stderr);
      assertOneErrorLine(r.stderr, /etcd-concurrency dev/);
      assert.match(r.stderr, /--endpoints/);
      assert.match(r.stderr, new RegExp(`127\\.0\\.0\\.1:${port}`));
      // Ended by the refusal, which the message names (not by a dial timeout).
      assert.match(r.stderr, /connection refused/);
    }
  });

  test('--debug adds the stack trace', async () => {
    const port = await closedPort();
    const r = await run(['inspect', 'x', '--endpoints', `127.0.0.1:${port}`, '--debug']);
    assert.equal(r.code, 1);
    assert.match(r.stderr, /^etcd-concurrency: /);
    assert.match(r.stderr, /\n\s+at /);
  });
});

describe('lock', () => {
  test('runs the command with ETCD_LOCK_KEY/ETCD_LOCK_REV, passes its exit code through, then unlocks', async () => {
    const name = fresh('lock-cmd');
    const p = start(['lock', name, '--endpoints', endpoint, '--', ...ECHO_ENV_THEN_WAIT], { stdin: true });
    const line = await p.next(/^env /);
    await p.next(/^ready$/);
    const m = /^env key=(\S+) rev=(\d+)$/.exec(line);
    assert.ok(m, line);
    const [, key, rev] = m;
    assert.match(key!, new RegExp(`^${name}/[0-9a-f]+$`));
    // The token is the key's CreateRevision, and the key is held while the command runs.
    const kv = await client.get(key!);
    assert.ok(kv, 'lock key exists while the command runs');
    assert.equal(kv.createRevision.toString(), rev);
    p.child.stdin!.end('7\n');
    assert.equal(await p.exited, 7);
    assert.equal(p.stderr(), '');
    await assertNoKeys(client, `${name}/`);
    await assertNoLeases(client);
  });

  test('`lock name cmd args` without -- works too, and a command killed by a signal gives 128+n', async () => {
    const name = fresh('lock-nodash');
    const ok = await run(['lock', name, '--endpoints', endpoint, 'true']);
    assert.equal(ok.code, 0, ok.stderr);
    const killed = await run(['lock', name, '--endpoints', endpoint, '--', ...nodeCmd(`process.kill(process.pid, 'SIGKILL')`)]);
    assert.equal(killed.code, 137, killed.stderr);
    await assertNoKeys(client, `${name}/`);
  });

  test('a command that does not exist exits 127 and leaves no key', async () => {
    const name = fresh('lock-enoent');
    const r = await run(['lock', name, '--endpoints', endpoint, '--', 'no-such-command-xyz']);
    assert.equal(r.code, 127);
    assertOneErrorLine(r.stderr, /cannot run no-such-command-xyz: command not found/);
    await assertNoKeys(client, `${name}/`);
  });

  test('without a command: prints key and token, holds until SIGINT, then unlocks and exits 0', async () => {
    const name = fresh('lock-hold');
    const p = start(['lock', name, '--endpoints', endpoint]);
    const line = await p.next(/^key=/);
    const m = new RegExp(`^key=(${name}/[0-9a-f]+) rev=(\\d+)$`).exec(line);
    assert.ok(m, line);
    assert.equal((await client.get(m[1]!))?.createRevision.toString(), m[2]);
    p.signal('SIGINT');
    assert.equal(await p.exited, 0);
    assert.equal(p.stderr(), '');
    await assertNoKeys(client, `${name}/`);
    await assertNoLeases(client);
  });

  test('without a command, a lost lock (key deleted) exits 3 with the message', async () => {
    const name = fresh('lock-hold-lost');
    const p = start(['lock', name, '--endpoints', endpoint]);
    const key = /^key=(\S+)/.exec(await p.next(/^key=/))![1]!;
    await client.delete(key);
    assert.equal(await p.exited, 3);
    assertOneErrorLine(p.stderr(), new RegExp(`lock lost: ${key} .*its key was deleted`));
  });

  test(
    'a lock key overwritten by hand (lease detached) counts as lost',
    async () => {
      const name = fresh('lock-replaced');
      const p = start(['lock', name, '--endpoints', endpoint]);
      const key = /^key=(\S+)/.exec(await p.next(/^key=/))![1]!;
      await client.put(key, '');
      // Were the loss missed, nothing would happen: bound the wait so the test fails instead of hanging.
      const code = await unlessAfter(p.exited, 10_000, 'still holding');
      await client.delete(key);
      await p.kill('SIGINT');
      assert.equal(code, 3);
    },
  );

  test('--json prints key, rev, lease and ttl as one JSON line', async () => {
    const name = fresh('lock-json');
    const p = start(['lock', name, '--endpoints', endpoint, '--json', '--ttl', '12']);
    const doc = JSON.parse(await p.next(/^\{/)) as { key: string; rev: string; lease: string; ttl: number };
    assert.equal(doc.key, `${name}/${doc.lease}`);
    assert.match(doc.rev, /^\d+$/);
    assert.equal(doc.ttl, 12);
    const kv = await client.get(doc.key);
    assert.equal(kv?.lease.toString(16), doc.lease);
    p.signal('SIGTERM');
    assert.equal(await p.exited, 0);
    await assertNoKeys(client, `${name}/`);
  });

  test('--timeout: gives up with exit 4, names the holder, and removes its own key', async () => {
    const name = fresh('lock-timeout');
    const holder = start(['lock', name, '--endpoints', endpoint]);
    const holderKey = /^key=(\S+)/.exec(await holder.next(/^key=/))![1]!;
    const r = await run(['lock', name, '--endpoints', endpoint, '--timeout', '300ms', '--', 'true']);
    assert.equal(r.code, 4);
    assertOneErrorLine(r.stderr, new RegExp(`timed out after 300ms waiting for lock ${name} \\(held by ${holderKey}`));
    assert.deepEqual(await keysOf(name), [holderKey]);
    holder.signal('SIGINT');
    assert.equal(await holder.exited, 0);
    await assertNoKeys(client, `${name}/`);
  });

  test('SIGINT / SIGTERM while waiting: leaves the queue and exits 130 / 143', async () => {
    const name = fresh('lock-wait-signal');
    const holder = start(['lock', name, '--endpoints', endpoint]);
    const holderKey = /^key=(\S+)/.exec(await holder.next(/^key=/))![1]!;
    for (const [sig, code] of [['SIGINT', 130], ['SIGTERM', 143]] as const) {
      const waiter = start(['lock', name, '--endpoints', endpoint, '--', 'true']);
      await waitFor(async () => (await keysOf(name)).length === 2, 'the waiter to queue');
      waiter.signal(sig);
      assert.equal(await waiter.exited, code);
      assertOneErrorLine(waiter.stderr(), new RegExp(`interrupted by ${sig}`));
      assert.deepEqual(await keysOf(name), [holderKey]);
    }
    holder.signal('SIGINT');
    assert.equal(await holder.exited, 0);
    await assertNoKeys(client, `${name}/`);
  });

  test('lock lost while the command runs: the command gets SIGTERM and we exit 3 saying so', async () => {
    const name = fresh('lock-lost');
    const p = start(['lock', name, '--endpoints', endpoint, '--', ...TRAP_SIGNALS]);
    await p.next(/^ready$/);
    const [key] = await keysOf(name);
    await client.delete(key!);
    await p.next(/^child got SIGTERM$/);
    assert.equal(await p.exited, 3);
    assertOneErrorLine(p.stderr(), /lock lost while the command ran: .*sent SIGTERM to the command/);
    await assertNoKeys(client, `${name}/`);
  });

  /** A command that ignores SIGTERM and, from then on, prints `alive` every 50 ms until it is killed. */
  const STUBBORN = nodeCmd(
    `process.on('SIGTERM', () => { console.log('ignoring SIGTERM'); setInterval(() => console.log('alive'), 50); });` +
      ` console.log('ready'); setInterval(() => {}, 1000);`,
  );

  test('lock lost and the command ignores SIGTERM: SIGKILL after --kill-grace (its length), exit 3', async () => {
    const name = fresh('lock-lost-kill');
    const p = start(['lock', name, '--endpoints', endpoint, '--kill-grace', '2s', '--', ...STUBBORN]);
    await p.next(/^ready$/);
    const [key] = await keysOf(name);
    await client.delete(key!);
    await p.next(/^ignoring SIGTERM$/);
    // Still alive, and told so, after the SIGTERM: no SIGKILL came with it.
    await p.next(/^alive$/);
    // A hang guard: well below the 10 s default grace, which a CLI ignoring --kill-grace would use.
    assert.equal(await unlessAfter(p.exited, 8000, 'still running 8 s after the loss'), 3);
    assertOneErrorLine(p.stderr(), /lock lost while the command ran.*SIGKILL follows in 2s/);
    await assertNoKeys(client, `${name}/`);
  });

  test('--kill-grace 0: SIGKILL right after SIGTERM, exit 3', async () => {
    const name = fresh('lock-lost-kill0');
    const p = start(['lock', name, '--endpoints', endpoint, '--kill-grace', '0', '--', ...STUBBORN]);
    await p.next(/^ready$/);
    const [key] = await keysOf(name);
    await client.delete(key!);
    // A hang guard: well below the 10 s default grace, which a CLI reading 0 as "unset" would use.
    assert.equal(await unlessAfter(p.exited, 8000, 'still running 8 s after the loss'), 3);
    assertOneErrorLine(p.stderr(), /lock lost while the command ran: .*sent SIGTERM to the command's process group and SIGKILL$/);
    await assertNoKeys(client, `${name}/`);
  });

  test('SIGTERM and SIGINT to the CLI are forwarded to the command; unlock after it exits', async () => {
    const name = fresh('lock-forward');
    const p = start(['lock', name, '--endpoints', endpoint, '--', ...TRAP_SIGNALS]);
    await p.next(/^ready$/);
    p.signal('SIGINT');
    await p.next(/^child got SIGINT$/);
    // The command chose to ignore SIGINT: it still runs and the lock is still held.
    assert.equal((await keysOf(name)).length, 1);
    p.signal('SIGTERM');
    await p.next(/^child got SIGTERM$/);
    assert.equal(await p.exited, 42);
    assert.equal(p.stderr(), '');
    await assertNoKeys(client, `${name}/`);
  });

  test('waiters are served in order (ETCD_LOCK_REV increasing), each command running alone', async () => {
    const name = fresh('lock-fifo');
    const holder = start(['lock', name, '--endpoints', endpoint]);
    await holder.next(/^key=/);
    const waiters: CliProc[] = [];
    // Each command reports its fencing token and when it ran (the common clock of this machine),
    // and runs for a while, so that two commands running at once would overlap.
    const report = (i: number): string =>
      `const from = performance.timeOrigin + performance.now(); setTimeout(() => console.log(JSON.stringify(` +
      `{ i: ${i}, rev: process.env.ETCD_LOCK_REV, from, to: performance.timeOrigin + performance.now() })), 50)`;
    for (let i = 0; i < 3; i++) {
      waiters.push(start(['lock', name, '--endpoints', endpoint, '--', ...nodeCmd(report(i))]));
      await waitFor(async () => (await keysOf(name)).length === i + 2, `waiter ${i} to queue`);
    }
    holder.signal('SIGINT');
    const codes = await Promise.all(waiters.map((w) => w.exited));
    assert.deepEqual(codes, [0, 0, 0]);
    const runs = waiters.map((w) => JSON.parse(w.stdout()) as { i: number; rev: string; from: number; to: number });
    assert.deepEqual(runs.map((r) => r.i), [0, 1, 2]);
    for (let i = 1; i < runs.length; i++) {
      assert.ok(BigInt(runs[i]!.rev) > BigInt(runs[i - 1]!.rev), `served in queue order: ETCD_LOCK_REV ${runs.map((r) => r.rev).join(', ')}`);
      assert.ok(runs[i]!.from >= runs[i - 1]!.to, `command ${i} started only after command ${i - 1} ended: ${JSON.stringify(runs)}`);
    }
    await holder.exited;
    await assertNoKeys(client, `${name}/`);
  });
});

describe('elect', () => {
  test('campaign leads, --listen reports every change including "no leader", resign on SIGINT', async () => {
    const name = fresh('elect');
    const listener = start(['elect', '--listen', name, '--endpoints', endpoint]);
    const jsonListener = start(['elect', '-l', name, '--endpoints', endpoint, '--json']);
    assert.equal(await listener.next(/./), 'no leader');
    assert.equal((JSON.parse(await jsonListener.next(/./)) as { type: string }).type, 'none');

    const a = start(['elect', name, 'alpha one', '--endpoints', endpoint]);
    const aLine = await a.next(/^leader /);
    const am = new RegExp(`^leader key=(${name}/([0-9a-f]+)) term=(\\d+) lease=\\2 value="alpha one"$`).exec(aLine);
    assert.ok(am, aLine);
    assert.equal(await listener.next(/./), aLine);
    const aj = JSON.parse(await jsonListener.next(/./)) as Record<string, string>;
    assert.deepEqual(
      { type: aj.type, key: aj.key, term: aj.term, value: aj.value, lease: aj.lease },
      { type: 'leader', key: am[1], term: am[3], value: 'alpha one', lease: am[2] },
    );

    const b = start(['elect', name, 'beta', '--endpoints', endpoint]);
    await waitFor(async () => (await keysOf(name)).length === 2, 'candidate b to queue');
    a.signal('SIGINT');
    assert.equal(await a.exited, 0);
    const bLine = await b.next(/^leader /);
    assert.match(bLine, /value=beta$/);
    assert.equal(await listener.next(/./), bLine);
    b.signal('SIGTERM');
    assert.equal(await b.exited, 0);
    assert.equal(await listener.next(/./), 'no leader');
    assert.equal((JSON.parse(await jsonListener.next(/"type":"none"/)) as { type: string }).type, 'none');

    listener.signal('SIGINT');
    jsonListener.signal('SIGINT');
    assert.equal(await listener.exited, 0);
    assert.equal(await jsonListener.exited, 0);
    assert.equal(listener.stderr() + a.stderr() + b.stderr(), '');
    await assertNoKeys(client, `${name}/`);
  });

  test('leadership lost (key deleted) exits 3 with the message', async () => {
    const name = fresh('elect-lost');
    const a = start(['elect', name, 'p', '--endpoints', endpoint]);
    const key = /key=(\S+)/.exec(await a.next(/^leader /))![1]!;
    await client.delete(key);
    assert.equal(await a.exited, 3);
    assertOneErrorLine(a.stderr(), /leadership lost/);
  });

  test('SIGINT before leading withdraws the candidacy and exits 130', async () => {
    const name = fresh('elect-withdraw');
    const a = start(['elect', name, 'a', '--endpoints', endpoint]);
    await a.next(/^leader /);
    const b = start(['elect', name, 'b', '--endpoints', endpoint]);
    await waitFor(async () => (await keysOf(name)).length === 2, 'candidate b to queue');
    b.signal('SIGINT');
    assert.equal(await b.exited, 130);
    assert.equal((await keysOf(name)).length, 1);
    a.signal('SIGINT');
    assert.equal(await a.exited, 0);
    await assertNoKeys(client, `${name}/`);
  });
});

describe('inspect', () => {
  test('shows the holder and the queue in order, plain and --json', async () => {
    const name = fresh('inspect');
    const empty = await run(['inspect', name, '--endpoints', endpoint]);
    assert.equal(empty.code, 0, empty.stderr);
    assert.match(empty.stdout, new RegExp(`^${name}: free, nobody waiting`));

    const holder = start(['lock', name, '--endpoints', endpoint, '--ttl', '20']);
    await holder.next(/^key=/);
    const waiters: CliProc[] = [];
    for (let i = 0; i < 2; i++) {
      waiters.push(start(['lock', name, '--endpoints', endpoint, '--', 'true']));
      await waitFor(async () => (await keysOf(name)).length === i + 2, `waiter ${i} to queue`);
    }
    const keys = await keysOf(name);

    const j = await run(['inspect', name, '--endpoints', endpoint, '--json']);
    assert.equal(j.code, 0, j.stderr);
    type P = { key: string; lease: string; ttl: number; grantedTtl: number; token: string; ageRevisions: string; value: string };
    const doc = JSON.parse(j.stdout) as { name: string; revision: string; owner: P; waiting: P[] };
    assert.equal(doc.name, name);
    assert.deepEqual([doc.owner.key, ...doc.waiting.map((w) => w.key)], keys);
    for (const p of [doc.owner, ...doc.waiting]) {
      assert.equal(p.key, `${name}/${p.lease}`);
      assert.ok(p.ttl > 0 && p.ttl <= p.grantedTtl, `ttl ${p.ttl}/${p.grantedTtl}`);
      assert.equal(BigInt(p.ageRevisions), BigInt(doc.revision) - BigInt(p.token));
      assert.equal((await client.get(p.key))?.createRevision.toString(), p.token);
    }
    assert.equal(doc.owner.grantedTtl, 20);
    assert.ok(BigInt(doc.owner.token) < BigInt(doc.waiting[0]!.token));
    assert.ok(BigInt(doc.waiting[0]!.token) < BigInt(doc.waiting[1]!.token));

    const plain = await run(['inspect', name, '--endpoints', endpoint]);
    assert.equal(plain.code, 0, plain.stderr);
    const lines = plain.stdout.trimEnd().split('\n');
    assert.match(lines[0]!, new RegExp(`^${name}: owned by ${keys[0]}, 2 waiting`));
    // Each lock carries its holder's label (default <hostname>:<pid>) as its value.
    assert.match(lines[1]!, /^ROLE\s+KEY\s+LEASE\s+TTL\s+TOKEN\s+AGE\s+VALUE$/);
    assert.match(lines[2]!, new RegExp(`^owner\\s+${keys[0]}\\s+[0-9a-f]+\\s+\\d+s/20s\\s+${doc.owner.token}\\s+\\d+ revs?\\s+\\S+:${holder.child.pid}$`));
    assert.match(lines[3]!, new RegExp(`^#1\\s+${keys[1]}\\s`));
    assert.match(lines[4]!, new RegExp(`^#2\\s+${keys[2]}\\s`));

    holder.signal('SIGINT');
    assert.deepEqual(await Promise.all([holder.exited, ...waiters.map((w) => w.exited)]), [0, 0, 0]);
    await assertNoKeys(client, `${name}/`);
  });

  test('--watch prints again on every change until SIGINT', async () => {
    const name = fresh('inspect-watch');
    const w = start(['inspect', name, '--endpoints', endpoint, '--watch', '--json']);
    assert.equal((JSON.parse(await w.next(/^\{/)) as { owner: unknown }).owner, null);
    const holder = start(['lock', name, '--endpoints', endpoint]);
    const key = /^key=(\S+)/.exec(await holder.next(/^key=/))![1]!;
    const seen = JSON.parse(await w.next(/"owner":\{/)) as { owner: { key: string } };
    assert.equal(seen.owner.key, key);
    holder.signal('SIGINT');
    await w.next(/"owner":null/);
    w.signal('SIGINT');
    assert.equal(await w.exited, 0);
    assert.equal(await holder.exited, 0);

    // Plain output: one block per change, separated by blank lines when not on a terminal.
    const plain = start(['inspect', name, '-w', '--endpoints', endpoint]);
    await plain.next(/free, nobody waiting/);
    const h2 = start(['lock', name, '--endpoints', endpoint]);
    await plain.next(/owned by/);
    h2.signal('SIGINT');
    await plain.next(/free, nobody waiting/);
    plain.signal('SIGINT');
    assert.equal(await plain.exited, 0);
    assert.equal(await h2.exited, 0);
    await assertNoKeys(client, `${name}/`);
  });

  test('--watch follows waiters joining and leaving the queue, and the owner changing, in order', { timeout: 60_000 }, async () => {
    const name = fresh('inspect-watch-queue');
    type Snap = { owner: { key: string } | null; waiting: { key: string }[] };
    const w = start(['inspect', name, '--endpoints', endpoint, '--watch', '--json']);
    /** The next snapshot (one JSON line each) for which `want` holds; the ones before it are skipped. */
    const snapshot = async (want: (s: Snap) => boolean): Promise<Snap> => {
      for (;;) {
        const s = JSON.parse(await w.next(/^\{/)) as Snap;
        if (want(s)) return s;
      }
    };
    const queue = (s: Snap): string[] => [s.owner?.key ?? '-', ...s.waiting.map((x) => x.key)];
    await snapshot((s) => s.owner === null);

    const holder = start(['lock', name, '--endpoints', endpoint]);
    const h = /^key=(\S+)/.exec(await holder.next(/^key=/))![1]!;
    assert.deepEqual(queue(await snapshot((s) => s.owner !== null)), [h]);
    // Two waiters join, one after the other: each appears at the end of the queue.
    const w1 = start(['lock', name, '--endpoints', endpoint]);
    const one = await snapshot((s) => s.waiting.length === 1);
    const k1 = one.waiting[0]!.key;
    assert.deepEqual(queue(one), [h, k1]);
    const w2 = start(['lock', name, '--endpoints', endpoint]);
    const two = await snapshot((s) => s.waiting.length === 2);
    const k2 = two.waiting[1]!.key;
    assert.deepEqual(queue(two), [h, k1, k2]);
    assert.deepEqual(await keysOf(name), [h, k1, k2], 'as etcd has it');
    // The first waiter gives up (SIGINT while waiting): it leaves, the second moves up.
    w1.signal('SIGINT');
    assert.equal(await w1.exited, 130);
    assert.deepEqual(queue(await snapshot((s) => s.waiting.length === 1)), [h, k2]);
    // The holder lets go: the second waiter owns the lock, nobody waits.
    holder.signal('SIGINT');
    assert.equal(await holder.exited, 0);
    assert.deepEqual(queue(await snapshot((s) => s.owner?.key === k2)), [k2]);
    assert.equal(/^key=(\S+)/.exec(await w2.next(/^key=/))![1], k2);
    w2.signal('SIGINT');
    assert.equal(await w2.exited, 0);
    await snapshot((s) => s.owner === null);
    w.signal('SIGINT');
    assert.equal(await w.exited, 0);
    assert.equal(w.stderr() + w2.stderr(), '');
    assertOneErrorLine(w1.stderr(), /interrupted by SIGINT/);
    await assertNoKeys(client, `${name}/`);
  });
});

/**
 * `dev` prints no pids, so a member's process is found by its command line, in /proc (Linux). Where
 * there is no /proc, the test that kills a member is skipped, saying so.
 */
const hasProc = existsSync('/proc/self/cmdline');

/** The pids of the etcds whose `--data-dir` satisfies `match` (read from /proc). */
function etcdPids(match: (dataDir: string) => boolean): number[] {
  return readdirSync('/proc')
    .filter((d) => /^\d+$/.test(d))
    .filter((d) => {
      try {
        const argv = readFileSync(`/proc/${d}/cmdline`, 'utf8').split('\0');
        const i = argv.indexOf('--data-dir');
        return i >= 0 && argv[i + 1] !== undefined && match(argv[i + 1]!);
      } catch {
        return false; // gone meanwhile
      }
    })
    .map(Number);
}

/** The pid of the etcd whose data dir is `dataDir`. */
function memberPid(dataDir: string): number {
  const hits = etcdPids((d) => d === dataDir);
  assert.equal(hits.length, 1, `one etcd with --data-dir ${dataDir}: ${hits.join(', ')}`);
  return hits[0]!;
}

/** Whether a process exists (signal 0 checks without signalling). */
function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/**
 * Whatever happened in the test, nothing of a `dev` stays behind: SIGTERM if it still runs (it stops
 * its etcds and deletes its data dir), then, should it have died without doing so, its members
 * (found by their data dirs) are killed and the data dir removed.
 */
async function stopDev(dev: CliProc, dataDir: string | undefined): Promise<void> {
  await dev.kill('SIGTERM');
  if (dataDir === undefined || !existsSync(dataDir)) return;
  const left = hasProc ? etcdPids((d) => d.startsWith(`${dataDir}${path.sep}`)) : [];
  for (const pid of left) process.kill(pid, 'SIGKILL');
  await waitFor(() => left.every((pid) => !alive(pid)), `the members dev left (${left.join(', ')}) to die`);
  await rm(dataDir, { recursive: true, force: true });
}

describe('dev', () => {
  test('starts etcd, prints the endpoints and an export line, stops it on SIGINT', async () => {
    const dev = start(['dev']);
    let dataDir: string | undefined;
    try {
      const exportLine = await dev.next(/^export ETCDCTL_ENDPOINTS=/);
      const endpoints = exportLine.slice('export ETCDCTL_ENDPOINTS='.length);
      assert.match(endpoints, /^127\.0\.0\.1:\d+$/);
      dataDir = /^data and logs in (\S+);/.exec(await dev.next(/^data and logs in /))![1]!;
      assert.ok(existsSync(dataDir));
      // The other commands find it through ETCDCTL_ENDPOINTS.
      const r = await run(['lock', 'dev-check', '--', 'true'], { ETCDCTL_ENDPOINTS: endpoints });
      assert.equal(r.code, 0, r.stderr);
      dev.signal('SIGINT');
      assert.equal(await dev.exited, 0);
      assert.ok(!existsSync(dataDir), 'data dir removed');
      const after = await run(['inspect', 'dev-check'], { ETCDCTL_ENDPOINTS: endpoints });
      assert.equal(after.code, 1, 'etcd is gone');
    } finally {
      await stopDev(dev, dataDir);
    }
  });

  test('--members 3: three members of one cluster, every one listed; the CLI works with one down; all stop on SIGTERM', { skip: !hasProc && 'needs /proc to find a member\'s pid: `dev` does not print them' }, async () => {
    const dev = start(['dev', '--members', '3', '--json']);
    let dataDir: string | undefined;
    try {
      const doc = JSON.parse(await dev.next(/^\{/)) as { endpoints: string[]; dataDir: string; version: string };
      dataDir = doc.dataDir;
      assert.equal(doc.endpoints.length, 3, JSON.stringify(doc));
      assert.equal(new Set(doc.endpoints).size, 3);
      assert.ok(existsSync(doc.dataDir));
      // One cluster: every member answers, with the same cluster id and leader, each with its own id.
      const statuses = await Promise.all(
        doc.endpoints.map(async (e) => {
          const c = new Client({ endpoints: e });
          try {
            return await c.status();
          } finally {
            await c.close();
          }
        }),
      );
      assert.equal(new Set(statuses.map((st) => st.header.clusterId)).size, 1, 'one cluster');
      assert.equal(new Set(statuses.map((st) => st.header.memberId)).size, 3, 'three members');
      assert.equal(new Set(statuses.map((st) => st.leader)).size, 1, 'one leader, agreed by all');
      assert.ok(statuses[0]!.leader !== 0n);
      for (const st of statuses) assert.equal(st.version, doc.version);
      // The endpoints as printed are what the other commands take. With the first member killed (its
      // process found by its data dir), the two others still hold quorum and serve the CLI.
      const env = { ETCDCTL_ENDPOINTS: doc.endpoints.join(',') };
      const r = await run(['lock', 'dev-check', '--', 'true'], env);
      assert.equal(r.code, 0, r.stderr);
      const m0 = memberPid(path.join(doc.dataDir, 'm0'));
      process.kill(m0, 'SIGKILL');
      await waitFor(() => !alive(m0), 'the first member to die');
      const failover = await run(['lock', 'dev-check', '--dial-timeout', '1s', '--', ...nodeCmd('console.log(process.env.ETCD_LOCK_REV)')], env);
      assert.equal(failover.code, 0, failover.stderr);
      assert.match(failover.stdout, /^\d+\n$/);
      dev.signal('SIGTERM');
      assert.equal(await dev.exited, 0);
      assert.ok(!existsSync(doc.dataDir), 'data dir removed');
      for (const e of doc.endpoints) {
        const gone = await run(['inspect', 'dev-check', '--dial-timeout', '1s'], { ETCDCTL_ENDPOINTS: e });
        assert.equal(gone.code, 1, `member ${e} is gone`);
      }
    } finally {
      await stopDev(dev, dataDir);
    }
  });
});

/**
 * etcdctl deletes its key on SIGINT/SIGTERM but never revokes its session's lease (10 s for lock,
 * 60 s for elect, also created by elect --listen). Revoke those leftovers, after checking that none
 * of them belongs to us: our CLI must have revoked its own.
 */
async function revokeEtcdctlLeases(ourLeases: string[]): Promise<void> {
  const left = await client.leaseLeases();
  for (const hex of ourLeases) assert.ok(!left.includes(BigInt(`0x${hex}`)), `our lease ${hex} was not revoked`);
  await Promise.all(left.map((l) => client.leaseRevoke(l)));
}

const leaseOf = (key: string): string => key.slice(key.lastIndexOf('/') + 1);

describe('etcdctl interop', { skip: !hasEtcdctl() && 'etcdctl is not installed' }, () => {
  test('etcdctl lock holds: our lock waits (inspect shows both), then runs once etcdctl lets go', async () => {
    const name = fresh('interop-lock1');
    const ctl = spawnEtcdctl(endpoint, ['lock', name]);
    const ctlKey = await ctl.line(new RegExp(`^${name}/`));
    const ours = start(['lock', name, '--endpoints', endpoint, '--', ...nodeCmd(`console.log('ran ' + process.env.ETCD_LOCK_KEY)`)]);
    await waitFor(async () => (await keysOf(name)).length === 2, 'our lock to queue');
    const j = JSON.parse((await run(['inspect', name, '--endpoints', endpoint, '--json'])).stdout) as {
      owner: { key: string };
      waiting: { key: string }[];
    };
    assert.equal(j.owner.key, ctlKey);
    assert.equal(j.waiting.length, 1);
    assert.equal(ours.stdout(), '', 'our command must not run while etcdctl holds the lock');
    await ctl.kill();
    assert.equal(await ours.next(/^ran /), `ran ${j.waiting[0]!.key}`);
    assert.equal(await ours.exited, 0);
    await assertNoKeys(client, `${name}/`);
    await revokeEtcdctlLeases([leaseOf(j.waiting[0]!.key)]);
  });

  test('our lock holds: etcdctl lock waits, and gets the lock when we release it', async () => {
    const name = fresh('interop-lock2');
    const ours = start(['lock', name, '--endpoints', endpoint]);
    const ourKey = /^key=(\S+)/.exec(await ours.next(/^key=/))![1]!;
    const ctl = spawnEtcdctl(endpoint, ['lock', name]);
    await waitFor(async () => (await keysOf(name)).length === 2, 'etcdctl to queue');
    assert.equal(ctl.stdout(), '', 'etcdctl must not get the lock while we hold it');
    ours.signal('SIGINT');
    assert.equal(await ours.exited, 0);
    await ctl.line(new RegExp(`^${name}/`));
    await ctl.kill();
    await assertNoKeys(client, `${name}/`);
    await revokeEtcdctlLeases([leaseOf(ourKey)]);
  });

  test('etcdctl elect --listen sees our leader; our inspect and --listen see etcdctl\'s', async () => {
    const name = fresh('interop-elect');
    const ctlListen = spawnEtcdctl(endpoint, ['elect', '--listen', name]);
    const ours = start(['elect', name, 'from-cli', '--endpoints', endpoint]);
    const ourKey = /key=(\S+)/.exec(await ours.next(/^leader /))![1]!;
    await ctlListen.line(new RegExp(`^${ourKey}$`));
    await ctlListen.line(/^from-cli$/);
    ours.signal('SIGINT');
    assert.equal(await ours.exited, 0);
    await ctlListen.kill();

    const listen = start(['elect', '-l', name, '--endpoints', endpoint]);
    assert.equal(await listen.next(/./), 'no leader');
    const ctl = spawnEtcdctl(endpoint, ['elect', name, 'from-etcdctl']);
    const ctlKey = await ctl.line(new RegExp(`^${name}/`));
    assert.match(await listen.next(/./), new RegExp(`^leader key=${ctlKey} term=\\d+ lease=[0-9a-f]+ value=from-etcdctl$`));
    const j = JSON.parse((await run(['inspect', name, '--endpoints', endpoint, '--json'])).stdout) as { owner: { key: string; value: string } };
    assert.deepEqual({ key: j.owner.key, value: j.owner.value }, { key: ctlKey, value: 'from-etcdctl' });
    await ctl.kill();
    assert.equal(await listen.next(/./), 'no leader');
    listen.signal('SIGINT');
    assert.equal(await listen.exited, 0);
    await assertNoKeys(client, `${name}/`);
    await revokeEtcdctlLeases([leaseOf(ourKey)]);
  });
});

describe('three members', () => {
  test('ETCDCTL_ENDPOINTS with every member: lock and inspect work with the first member down', async () => {
    const cluster = await startEtcd({ members: 3 });
    try {
      await cluster.kill(0);
      const env = { ETCDCTL_ENDPOINTS: cluster.endpoints.join(',') };
      const name = 'three/n';
      const holder = start(['lock', name], { env });
      const key = /^key=(\S+)/.exec(await holder.next(/^key=/))![1]!;
      const r = await run(['inspect', name, '--json'], env);
      assert.equal(r.code, 0, r.stderr);
      assert.equal((JSON.parse(r.stdout) as { owner: { key: string } }).owner.key, key);
      const waiter = start(['lock', name, '--', ...nodeCmd(`console.log(process.env.ETCD_LOCK_REV)`)], { env });
      const c = new Client({ endpoints: cluster.endpoints.slice(1) });
      try {
        await waitFor(async () => (await c.getPrefix(`${name}/`)).kvs.length === 2, 'the waiter to queue');
        holder.signal('SIGINT');
        assert.equal(await holder.exited, 0);
        const rev = await waiter.next(/^\d+$/);
        assert.ok(BigInt(rev) > 0n);
        assert.equal(await waiter.exited, 0);
        assert.equal((await c.getPrefix(`${name}/`)).kvs.length, 0);
      } finally {
        await c.close();
      }
    } finally {
      await cluster.stop();
    }
  });
});

describe('losing etcd', () => {
  test('etcd goes away while the command runs: the session deadline passes, SIGTERM, exit 3', async () => {
    const own = await startEtcd({ members: 1 });
    try {
      const p = start(['lock', 'gone/n', '--endpoints', own.endpoints[0]!, '--ttl', '2', '--', ...TRAP_SIGNALS]);
      await p.next(/^ready$/);
      await own.kill(0);
      await p.next(/^child got SIGTERM$/);
      assert.equal(await p.exited, 3);
      assertOneErrorLine(p.stderr(), /lock lost while the command ran: .*session was lost/);
    } finally {
      await own.stop();
    }
  });
});

describe('TLS and auth flags', { skip: !(hasOpenssl() && hasEtcdctl()) && 'needs openssl and etcdctl' }, () => {
  let dir: string;
  let secure: EtcdCluster;
  let url: string;
  const file = (f: string): string => path.join(dir, f);

  before(async () => {
    // A throwaway CA and one certificate for 127.0.0.1 that serves as both server and client certificate.
    const certs = await testCerts('cli-tls');
    dir = certs.dir;
    secure = await startEtcd({ members: 1, tls: certs.etcdTls });
    url = secure.clientUrls[0]!;
    const tlsArgs = [`--cacert=${file('ca.pem')}`, `--cert=${file('node.pem')}`, `--key=${file('node.key')}`];
    for (const args of [['user', 'add', 'root:s3cret-pw'], ['auth', 'enable']]) {
      const r = spawnSync('etcdctl', [`--endpoints=${url}`, ...tlsArgs, ...args], { env: { ...process.env, ETCDCTL_API: '3' }, encoding: 'utf8' });
      assert.equal(r.status, 0, r.stderr);
    }
  });

  after(async () => {
    await secure?.stop();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  test('--cacert/--cert/--key and --user work, also from ETCDCTL_* variables', async () => {
    const flags = ['--endpoints', url, '--cacert', file('ca.pem'), '--cert', file('node.pem'), '--key', file('node.key')];
    const ok = await run(['lock', 'tls/n', ...flags, '--user', 'root:s3cret-pw', '--', 'true']);
    assert.equal(ok.code, 0, ok.stderr);
    const env = {
      ETCDCTL_ENDPOINTS: url,
      ETCDCTL_CACERT: file('ca.pem'),
      ETCDCTL_CERT: file('node.pem'),
      ETCDCTL_KEY: file('node.key'),
      ETCDCTL_USER: 'root',
      ETCDCTL_PASSWORD: 's3cret-pw',
    };
    const viaEnv = await run(['inspect', 'tls/n', '--json'], env);
    assert.equal(viaEnv.code, 0, viaEnv.stderr);
    assert.equal((JSON.parse(viaEnv.stdout) as { owner: unknown }).owner, null);
  });

  test('a wrong password fails in one line that never shows the password', async () => {
    const flags = ['--endpoints', url, '--cacert', file('ca.pem'), '--cert', file('node.pem'), '--key', file('node.key')];
    const r = await run(['lock', 'tls/n', ...flags, '--user', 'root:not-the-pw', '--', 'true']);
    assert.equal(r.code, 1);
    assertOneErrorLine(r.stderr, /authentication failed/);
    assert.doesNotMatch(r.stderr, /not-the-pw/);
  });

  test('a missing client certificate or an unreadable file is reported in one line', async () => {
    const noCert = await run(['inspect', 'tls/n', '--endpoints', url, '--cacert', file('ca.pem'), '--user', 'root:s3cret-pw']);
    assert.equal(noCert.code, 1);
    assertOneErrorLine(noCert.stderr, /could not connect to etcd at/);
    const missing = await run(['inspect', 'tls/n', '--endpoints', url, '--cacert', file('nope.pem')]);
    assert.equal(missing.code, 2);
    assertOneErrorLine(missing.stderr, /--cacert: cannot read .*nope\.pem \(ENOENT\)/);
    const half = await run(['inspect', 'tls/n', '--endpoints', url, '--cert', file('node.pem')]);
    assert.equal(half.code, 2);
    assertOneErrorLine(half.stderr, /--cert and --key together/);
  });

  test(
    'a server that requires a client certificate, reached without one, is diagnosed as such',
    async () => {
      const r = await run(['inspect', 'tls/n', '--endpoints', url, '--cacert', file('ca.pem')]);
      assert.equal(r.code, 1);
      assert.match(r.stderr, /client certificate/);
    },
  );
});
