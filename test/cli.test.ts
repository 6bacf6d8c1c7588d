// The built `etcd-concurrency` CLI (dist/cli/main.js), run as a child process against a real etcd:
// help and usage errors, `lock` and `elect` (inspect: cli-inspect.test.ts; dev, three members and a
// lost etcd: cli-dev.test.ts; etcdctl and TLS: cli-etcdctl.test.ts). Run `npm run build` first.
// Every wait is on a child's output line, its exit, or etcd state; never on a sleep.
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { setTimeout as delay } from 'node:timers/promises';
import type { Client } from '../src/index.js';
import {
  assertNoKeys,
  assertNoLeases,
  assertOneErrorLine,
  cliFile,
  runCli as start,
  runCliToEnd as run,
  waitFor,
  closedPort,
  type CliProc,
} from './helpers.js';

const ROOT = 'test/cli/';

let client: Client;
let endpoint: string;

const { fresh, keysOf } = cliFile(ROOT, (e, c) => ((client = c), (endpoint = e.endpoints[0]!)));

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

  test('a lock key overwritten by hand (lease detached) counts as lost', async () => {
    const name = fresh('lock-replaced');
    const p = start(['lock', name, '--endpoints', endpoint]);
    const key = /^key=(\S+)/.exec(await p.next(/^key=/))![1]!;
    await client.put(key, '');
    // Were the loss missed, nothing would happen: bound the wait so the test fails instead of hanging.
    const code = await unlessAfter(p.exited, 10_000, 'still holding');
    await client.delete(key);
    await p.kill('SIGINT');
    assert.equal(code, 3);
  });

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
    for (const [sig, code] of [
      ['SIGINT', 130],
      ['SIGTERM', 143],
    ] as const) {
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
    assert.deepEqual(
      runs.map((r) => r.i),
      [0, 1, 2],
    );
    for (let i = 1; i < runs.length; i++) {
      assert.ok(
        BigInt(runs[i]!.rev) > BigInt(runs[i - 1]!.rev),
        `served in queue order: ETCD_LOCK_REV ${runs.map((r) => r.rev).join(', ')}`,
      );
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
