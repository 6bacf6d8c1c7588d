// The built CLI's `dev` (one or three members of etcd it starts and stops), and the CLI against a
// cluster with a member down or an etcd that goes away. Run `npm run build` first. Every wait is on
// a child's output line, its exit, or etcd state; never on a sleep.
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { rm } from 'node:fs/promises';
import path from 'node:path';
import { Client } from '../src/index.js';
import { startEtcd } from '../src/testing/index.js';
import { assertOneErrorLine, etcdForCliFile, runCli as start, runCliToEnd as run, waitFor, type CliProc } from './helpers.js';

const ROOT = 'test/cli-dev/';

etcdForCliFile(ROOT, () => {});

/** `node -e <script>` as a command for `lock -- ...`. */
const nodeCmd = (script: string): string[] => [process.execPath, '-e', script];

/** A child that reports the signals it gets; on SIGTERM it exits with 42. */
const TRAP_SIGNALS = nodeCmd(
  `for (const s of ['SIGINT', 'SIGTERM']) process.on(s, () => { console.log('child got ' + s); if (s === 'SIGTERM') process.exit(42); });` +
    `console.log('ready'); setInterval(() => {}, 1000);`,
);

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

  test('--members 3: three members of one cluster, every one listed; the CLI works with one down; all stop on SIGTERM', {
    skip: !hasProc && "needs /proc to find a member's pid: `dev` does not print them",
  }, async () => {
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
      const failover = await run(
        ['lock', 'dev-check', '--dial-timeout', '1s', '--', ...nodeCmd('console.log(process.env.ETCD_LOCK_REV)')],
        env,
      );
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
