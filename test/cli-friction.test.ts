// CLI friction a newcomer hit: the `--` hint for a command's own option, "did you
// mean" for a mistyped flag, `--ttl 10s`, `--timeout 2` reported with its unit, names with white
// space or a leading `/`, and lease ids in hex everywhere. Runs the built CLI: `npm run build` first.
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { Mutex, Session, type Client } from '../src/index.js';
import type { EtcdCluster } from '../src/testing/index.js';
import { assertOneErrorLine, etcdForCliFile, runCli, runCliToEnd } from './helpers.js';

let etcd: EtcdCluster;
let client: Client;
const fresh = etcdForCliFile('test/cli-friction/', (e, c) => ((etcd = e), (client = c)));
const ep = (): string[] => ['--endpoints', etcd.endpoints[0]!];

describe('mistyped and misplaced options', () => {
  test("a command's own option without `--` says where `--` goes", async () => {
    const r = await runCliToEnd([...ep(), 'lock', 'x', 'ls', '-l']);
    assert.equal(r.code, 2);
    assertOneErrorLine(
      r.stderr,
      /unknown option -l; if it is meant for the command to run, put -- before the command: lock <name> \[options\] -- <command> -l/,
    );
  });

  test('a mistyped flag gets "did you mean"', async () => {
    for (const [args, want] of [
      [['lock', 'x', '--tll', '5'], '--ttl'],
      [['lock', 'x', '--timout', '5s'], '--timeout'],
      [['elect', '--lisen', 'x'], '--listen'],
      [['inspect', 'x', '--jsno'], '--json'],
      [['lock', 'x', '--endpoint', 'h:1'], '--endpoints'],
    ] as const) {
      const r = await runCliToEnd([...args]);
      assert.equal(r.code, 2, r.stderr);
      assertOneErrorLine(r.stderr, new RegExp(`unknown option --\\w+; did you mean ${want}\\?`));
    }
    const far = await runCliToEnd(['lock', 'x', '--frobnicate']);
    assertOneErrorLine(far.stderr, /^etcd-concurrency: unknown option --frobnicate; if it is meant/);
  });
});

describe('durations', () => {
  test('--ttl takes 10s and 2m as it takes 10; a fraction of a second is refused', async () => {
    const name = `${fresh('ttl')}lock`;
    const p = runCli([...ep(), 'lock', name, '--ttl', '10s', '--json']);
    const line = await p.next(/^\{/);
    assert.equal((JSON.parse(line) as { ttl: number }).ttl, 10);
    assert.equal(await p.kill('SIGINT'), 0);
    const e = runCli([...ep(), 'elect', `${fresh('ttl-elect')}e`, 'v', '--ttl', '2m', '--json']);
    const leader = JSON.parse(await e.next(/^\{/)) as { lease: string };
    assert.equal((await client.leaseTimeToLive(BigInt(`0x${leader.lease}`))).grantedTtl, 120);
    assert.equal(await e.kill('SIGINT'), 0);
    const bad = await runCliToEnd([...ep(), 'lock', 'x', '--ttl', '1500ms']);
    assert.equal(bad.code, 2);
    assertOneErrorLine(bad.stderr, /--ttl must be a whole number of seconds from 2 to \d+, got "1500ms" \(e\.g\. 30, 30s or 2m\)/);
  });

  test('--timeout 1 reports "timed out after 1s", with its unit', async () => {
    const name = `${fresh('timeout')}lock`;
    const s = await Session.create(client);
    try {
      await new Mutex(s, name).lock();
      const r = await runCliToEnd([...ep(), 'lock', name, '--timeout', '1', '--', 'true']);
      assert.equal(r.code, 4, r.stderr);
      assertOneErrorLine(r.stderr, /timed out after 1s waiting for lock /);
    } finally {
      await s.close();
    }
  });
});

describe('names', () => {
  test('leading or trailing white space is refused before anything is sent', async () => {
    for (const name of [' jobs/x', 'jobs/x ', '\tjobs']) {
      const r = await runCliToEnd(['--endpoints', '127.0.0.1:1', 'lock', name, '--try']);
      assert.equal(r.code, 2, r.stderr);
      assertOneErrorLine(r.stderr, /starts or ends with white space; drop it/);
    }
  });

  test('white space inside, or a leading "/", is allowed (as etcdctl) with a warning', async () => {
    const spaced = `${fresh('names')}night jobs`;
    const a = await runCliToEnd([...ep(), 'lock', spaced, '--try', '--', 'true']);
    assert.equal(a.code, 0, a.stderr);
    assert.match(a.stderr, /contains white space: every participant must quote it the same way/);
    const slash = `/${fresh('names')}slash`;
    const b = await runCliToEnd([...ep(), 'lock', slash, '--try', '--', 'true']);
    assert.equal(b.code, 0, b.stderr);
    assert.match(b.stderr, /starts with "\/": keys are not paths, so "\/test\/.*slash" and "test\/.*slash" are different names/);
  });
});

describe('lease ids', () => {
  test('in hex in every output that shows one, as inspect and etcdctl show them', async () => {
    const name = `${fresh('hex')}lock`;
    const p = runCli([...ep(), 'lock', name, '--json']);
    const held = JSON.parse(await p.next(/^\{/)) as { key: string; lease: string };
    assert.match(held.lease, /^[0-9a-f]+$/);
    assert.equal(held.key, `${name}/${held.lease}`, 'the key ends with the same hex');
    const inspect = await runCliToEnd([...ep(), 'inspect', name, '--json']);
    assert.ok(inspect.stdout.includes(held.lease), inspect.stdout);
    assert.equal(await p.kill('SIGINT'), 0);
  });
});
