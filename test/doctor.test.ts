// `etcd-concurrency doctor` (the built CLI, dist/cli/main.js) against real etcd: a healthy
// three-member cluster, the same with one member down, users with and without permission on the
// prefix, TLS with a wrong CA or without a client certificate, and a closed port. Run `npm run
// build` first. Every wait is on the child's exit or on etcd state; of the latencies it measures
// only the watch catch-up is asserted (etcd's 100 ms loop), the rest only that they were measured.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { rm } from 'node:fs/promises';
import { once } from 'node:events';
import path from 'node:path';
import { promisify } from 'node:util';
import { Client } from '../src/index.js';
import { startEtcd, type EtcdCluster } from '../src/testing/index.js';
import {
  CLI_MAIN,
  assertCleanAndStop,
  assertNoKeys,
  assertNoLeases,
  assertOneErrorLine,
  closedPort,
  hasOpenssl,
  spawnCli,
  testCerts,
  uniquePrefix,
} from './helpers.js';

const run = promisify(execFile);
const ROOT = 'test/doctor/';
/** A prefix under ROOT no other test uses. */
const fresh = (scope: string): string => `${ROOT}${uniquePrefix(scope).slice('test/'.length)}`;

/** Exit codes as docs/cli.md documents them for doctor. */
const READY = 0;
const WARNINGS = 5;
const NOT_READY = 6;

/** etcd 3.4 is end of life: doctor warns about it on an otherwise healthy cluster. */
const healthyCode = (version: string): number => (version.startsWith('3.4.') ? WARNINGS : READY);

interface Check {
  name: string;
  level: 'ok' | 'info' | 'warn' | 'fail' | 'skip';
  message: string;
  fix?: string;
}

interface Member {
  id: string | null;
  name: string | null;
  endpoint: string;
  version: string | null;
  leader: string | null;
  isLeader: boolean;
  error: string | null;
}

interface Stats {
  samples: number;
  medianMs: number;
  maxMs: number;
}

interface Report {
  status: string;
  exitCode: number;
  endpoints: string[];
  prefix: string;
  memberSource: string;
  members: Member[];
  versions: string[];
  auth: { enabled: boolean | null; user: string | null; renewalNeedsPutPermission: boolean };
  roundTrips: Record<'put' | 'read' | 'watch' | 'renewal', Stats | null>;
  catchUp: (Stats & { paysDelay: boolean }) | null;
  lease: Record<'grant' | 'attach' | 'renew' | 'revoke', 'ok' | 'skipped' | { error: string }>;
  ttl: { recommended: number; worstRoundTripMs: number; allowanceMs: number } | null;
  clockRate: null;
  checks: Check[];
}

/** Runs the CLI to completion. */
async function doctor(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  const child = spawnCli(['doctor', ...args]);
  let stdout = '';
  let stderr = '';
  child.stdout!.setEncoding('utf8').on('data', (d: string) => (stdout += d));
  child.stderr!.setEncoding('utf8').on('data', (d: string) => (stderr += d));
  const [code, signal] = (await once(child, 'close')) as [number | null, NodeJS.Signals | null];
  assert.equal(signal, null, `doctor died of ${signal}; stderr: ${stderr}`);
  return { code: code!, stdout, stderr };
}

/** `etcd-concurrency help doctor`. */
async function spawnHelp(): Promise<{ code: number; stdout: string }> {
  const child = spawnCli(['help', 'doctor']);
  let stdout = '';
  child.stdout!.setEncoding('utf8').on('data', (d: string) => (stdout += d));
  const [code] = (await once(child, 'close')) as [number | null];
  return { code: code!, stdout };
}

/** doctor --json: its exit code and its one JSON line, parsed. */
async function doctorJson(args: string[]): Promise<{ code: number; report: Report; stderr: string }> {
  const r = await doctor([...args, '--json']);
  const lines = r.stdout.trimEnd().split('\n');
  assert.equal(lines.length, 1, `one JSON line expected; stdout: ${r.stdout}; stderr: ${r.stderr}`);
  const report = JSON.parse(lines[0]!) as Report;
  assert.equal(report.exitCode, r.code, 'the exit code is the one the report gives');
  return { code: r.code, report, stderr: r.stderr };
}

const check = (r: Report, name: string): Check[] => r.checks.filter((c) => c.name === name);

function assertMeasured(s: Stats | null, samples: number, what: string): void {
  assert.ok(s, `${what} measured`);
  assert.equal(s.samples, samples, `${what}: samples`);
  assert.ok(Number.isFinite(s.medianMs) && s.medianMs >= 0 && s.maxMs >= s.medianMs, `${what}: ${JSON.stringify(s)}`);
}

before(() => {
  assert.ok(existsSync(CLI_MAIN), `${CLI_MAIN} is missing: run \`npm run build\` first`);
});

describe('doctor on a three-member cluster', () => {
  let etcd: EtcdCluster;
  let client: Client;

  before(async () => {
    etcd = await startEtcd({ members: 3 });
    client = new Client({ endpoints: etcd.endpoints });
  });

  after(() => assertCleanAndStop(client, etcd, ROOT));

  test('healthy: every check passes, every field is in the JSON, and nothing is left behind', async () => {
    const prefix = fresh('doctor-healthy');
    const { code, report } = await doctorJson(['--endpoints', etcd.endpoints.join(','), '--prefix', prefix, '--samples', '3']);
    assert.equal(code, healthyCode(etcd.version), JSON.stringify(report.checks));
    assert.equal(report.status, code === READY ? 'ready' : 'warnings');
    assert.equal(report.prefix, prefix);
    assert.deepEqual(report.endpoints, etcd.endpoints);
    assert.equal(report.memberSource, 'member-list');
    // Every member, with its version and the one leader they agree on.
    assert.equal(report.members.length, 3);
    assert.deepEqual(report.members.map((m) => m.endpoint).sort(), [...etcd.endpoints].sort());
    assert.deepEqual(report.members.map((m) => m.name).sort(), ['m0', 'm1', 'm2']);
    const leaders = new Set(report.members.map((m) => m.leader));
    assert.equal(leaders.size, 1);
    assert.notEqual([...leaders][0], '0');
    assert.equal(report.members.filter((m) => m.isLeader).length, 1);
    for (const m of report.members) {
      assert.equal(m.version, etcd.version);
      assert.equal(m.error, null);
    }
    assert.deepEqual(report.versions, [etcd.version]);
    assert.deepEqual(report.auth, { enabled: false, user: null, renewalNeedsPutPermission: report.auth.renewalNeedsPutPermission });
    for (const kind of ['put', 'read', 'watch', 'renewal'] as const) assertMeasured(report.roundTrips[kind], 3, kind);
    assertMeasured(report.catchUp, 3, 'catch-up');
    // Every etcd version serves a watch from a past revision from its 100 ms catch-up loop: the
    // first sample waits for the loop's next pass (0 to 100 ms), and each later one is created just
    // after the pass that served the last, so it waits most of a whole period: the median is above 50 ms.
    assert.equal(report.catchUp!.paysDelay, true, JSON.stringify(report.catchUp));
    assert.ok(report.catchUp!.medianMs >= 50, JSON.stringify(report.catchUp));
    assert.deepEqual(report.lease, { grant: 'ok', attach: 'ok', renew: 'ok', revoke: 'ok' });
    assert.ok(report.ttl && Number.isInteger(report.ttl.recommended) && report.ttl.recommended >= 2, JSON.stringify(report.ttl));
    assert.equal(report.clockRate, null);
    const levels = Object.fromEntries(report.checks.map((c) => [c.name, c.level]));
    assert.deepEqual(levels, {
      members: 'ok',
      versions: code === READY ? 'ok' : 'warn',
      leader: 'ok',
      alarms: 'ok',
      'round trips': 'ok',
      'watch catch-up': 'info',
      auth: 'info',
      lease: 'ok',
      ttl: 'info',
      'clock rate': 'skip',
    });
    if (code === WARNINGS) assert.match(check(report, 'versions')[0]!.message, /3\.4 line is end of life/);
    // Its scratch keys and its lease are gone.
    await assertNoKeys(client, prefix);
    await assertNoLeases(client);
  });

  test('healthy, human output: one line per check, then the verdict', async () => {
    const prefix = fresh('doctor-human');
    const r = await doctor(['--endpoints', etcd.endpoints[0]!, '--prefix', prefix, '--samples', '1']);
    assert.equal(r.code, healthyCode(etcd.version), r.stdout + r.stderr);
    assert.equal(r.stderr, '');
    assert.match(r.stdout, /^etcd-concurrency doctor: 3 members, scratch keys under /);
    assert.match(r.stdout, /^\s+MEMBER\s+ID\s+ENDPOINT\s+VERSION\s+TERM\s+DB\s+STATE$/m);
    assert.equal(r.stdout.match(/\bleader$/gm)?.length, 1, r.stdout);
    assert.match(r.stdout, /^ok\s+members\s+3 of 3 members answer$/m);
    assert.match(r.stdout, /^ok\s+round trips\s+put .* linearizable read .* watch notification .*\(median of 1; worst /m);
    assert.match(r.stdout, /^ok\s+lease\s+granted a lease, attached a key under .*, renewed it .*, revoked it$/m);
    assert.match(r.stdout, /^info\s+ttl\s+use a lease TTL of at least \d+ s/m);
    assert.match(r.stdout, /^skip\s+clock rate\s+not checked/m);
    assert.match(r.stdout, r.code === READY ? /\nready \(exit 0\)\n$/ : /\nready, with 1 warning \(exit 5\)\n$/);
    await assertNoKeys(client, prefix);
  });

  test('one member down: reported as unreachable, with a warning (exit 5), through all endpoints or MemberList', async () => {
    // A follower, so that the cluster keeps its leader and the outcome does not hang on an election.
    const leader = await etcd.leaderIndex();
    const downIndex = (leader + 1) % 3;
    const downEndpoint = etcd.endpoints[downIndex]!;
    const live = etcd.endpoints.filter((_, i) => i !== downIndex);
    await etcd.kill(downIndex);
    try {
      for (const endpoints of [etcd.endpoints, [live[0]!]]) {
        const prefix = fresh('doctor-down');
        const { code, report } = await doctorJson(['--endpoints', endpoints.join(','), '--prefix', prefix, '--samples', '1']);
        assert.equal(code, WARNINGS, JSON.stringify(report.checks));
        assert.equal(report.status, 'warnings');
        assert.equal(report.members.length, 3, 'MemberList names the member that is down');
        const down = report.members.find((m) => m.endpoint === downEndpoint);
        assert.ok(down, JSON.stringify(report.members));
        assert.equal(down.version, null);
        assert.equal(down.name, `m${downIndex}`);
        assert.match(down.error ?? '', /unreachable: connection refused/);
        for (const m of report.members.filter((x) => x !== down)) assert.equal(m.version, etcd.version);
        const [members] = check(report, 'members');
        assert.equal(members!.level, 'warn');
        assert.match(members!.message, new RegExp(`2 of 3 members answer; m${downIndex} \\(${downEndpoint.replace(/\./g, '\\.')}\\)`));
        assert.match(members!.fix ?? '', /quorum/);
        // Locks still work: the rest of the checks pass.
        assert.equal(check(report, 'leader')[0]!.level, 'ok');
        assert.equal(check(report, 'round trips')[0]!.level, 'ok');
        assert.equal(check(report, 'lease')[0]!.level, 'ok');
        await assertNoKeys(client, prefix);
      }
    } finally {
      await etcd.restart(downIndex);
    }
  });
});

const ROOT_PASSWORD = 'r00t-Pw-d0c70r';
const LIMITED_PASSWORD = 'l1m1ted-Pw-9d3a';
const LOCKER_PASSWORD = 'l0cker-Pw-51e8';

describe('doctor with authentication', () => {
  let etcd: EtcdCluster;
  let root: Client;
  /** Where `locker` may read and write, and `limited` may not. */
  const LOCKS = 'locks/';

  before(async () => {
    etcd = await startEtcd();
    const ctl = (...args: string[]) =>
      run(etcd.etcdctlBinary ?? 'etcdctl', [`--endpoints=${etcd.endpoints[0]}`, ...args], { env: { ...process.env, ETCDCTL_API: '3' } });
    await ctl('user', 'add', `root:${ROOT_PASSWORD}`, '--interactive=false');
    await ctl('user', 'add', `limited:${LIMITED_PASSWORD}`, '--interactive=false');
    await ctl('user', 'add', `locker:${LOCKER_PASSWORD}`, '--interactive=false');
    await ctl('role', 'add', 'elsewhere');
    await ctl('role', 'grant-permission', 'elsewhere', '--prefix=true', 'readwrite', 'other/');
    await ctl('user', 'grant-role', 'limited', 'elsewhere');
    await ctl('role', 'add', 'locker');
    await ctl('role', 'grant-permission', 'locker', '--prefix=true', 'readwrite', LOCKS);
    await ctl('user', 'grant-role', 'locker', 'locker');
    await ctl('auth', 'enable');
    root = new Client({ endpoints: etcd.endpoints, auth: { username: 'root', password: ROOT_PASSWORD } });
  });

  after(() => assertCleanAndStop(root, etcd, [LOCKS, 'other/']));

  /** doctor's arguments as `user` (name:password) on the prefix LOCKS, with `samples` round trips. */
  const asUser = (user: string, samples: string): string[] => [
    '--endpoints',
    etcd.endpoints[0]!,
    '--user',
    user,
    '--prefix',
    LOCKS,
    '--samples',
    samples,
  ];

  test('a user without permission on the prefix: not ready (exit 6), saying what to grant', async () => {
    const { code, report } = await doctorJson(asUser(`limited:${LIMITED_PASSWORD}`, '1'));
    assert.equal(code, NOT_READY, JSON.stringify(report.checks));
    assert.equal(report.status, 'not-ready');
    assert.equal(report.auth.enabled, true);
    assert.equal(report.auth.user, 'limited');
    // Members, versions and the leader are still reported.
    assert.equal(report.members.length, 1);
    assert.equal(report.members[0]!.version, etcd.version);
    const [rt] = check(report, 'round trips');
    assert.equal(rt!.level, 'fail');
    assert.match(rt!.message, /permission denied/);
    assert.match(rt!.fix ?? '', /etcdctl role grant-permission <role of limited> --prefix=true readwrite locks\//);
    // Any user may grant a lease; attaching a key under the prefix is refused, with the grant to make.
    assert.equal(report.lease.grant, 'ok');
    assert.match((report.lease.attach as { error: string }).error, /permission denied/);
    assert.equal(report.lease.renew, 'skipped');
    assert.equal(report.lease.revoke, 'ok');
    const [lease] = check(report, 'lease');
    assert.equal(lease!.level, 'fail');
    assert.match(lease!.fix ?? '', /grant-permission <role of limited> --prefix=true readwrite locks\//);
    assert.equal(report.ttl, null);
    // The password appears nowhere.
    assert.doesNotMatch(JSON.stringify(report), new RegExp(LIMITED_PASSWORD));
    await assertNoLeases(root);
  });

  test('the same, in human output: the failures and a fix line each', async () => {
    const r = await doctor(asUser(`limited:${LIMITED_PASSWORD}`, '1'));
    assert.equal(r.code, NOT_READY, r.stdout + r.stderr);
    assert.match(r.stdout, /^fail\s+round trips\s+writing locks\/[0-9a-f]+\/round-trip failed: .*permission denied/m);
    assert.match(r.stdout, /^fail\s+lease\s+attaching locks\/[0-9a-f]+\/lease to the lease: .*permission denied/m);
    assert.match(r.stdout, /^\s+fix: .*etcdctl role grant-permission <role of limited> --prefix=true readwrite locks\//m);
    assert.match(r.stdout, /\nnot ready: 2 failed checks.* \(exit 6\)\n$/);
    await assertNoLeases(root);
  });

  test('a user whose role grants readwrite on the prefix: ready', async () => {
    const { code, report } = await doctorJson(asUser(`locker:${LOCKER_PASSWORD}`, '2'));
    assert.equal(code, healthyCode(etcd.version), JSON.stringify(report.checks));
    assert.deepEqual(report.auth, { enabled: true, user: 'locker', renewalNeedsPutPermission: report.auth.renewalNeedsPutPermission });
    assert.deepEqual(report.lease, { grant: 'ok', attach: 'ok', renew: 'ok', revoke: 'ok' });
    assert.equal(check(report, 'round trips')[0]!.level, 'ok');
    assert.match(check(report, 'auth')[0]!.message, /^on; checked as user locker/);
    await assertNoKeys(root, LOCKS);
    await assertNoLeases(root);
  });

  test("a wrong password, or no user at all: the CLI's one-line authentication error, exit 1", async () => {
    const wrong = await doctor(['--endpoints', etcd.endpoints[0]!, '--user', 'locker:wrong-password', '--prefix', LOCKS]);
    assert.equal(wrong.code, 1, wrong.stderr);
    assert.equal(wrong.stdout, '');
    assertOneErrorLine(wrong.stderr, /wrong user name or password/);
    const none = await doctor(['--endpoints', etcd.endpoints[0]!, '--prefix', LOCKS]);
    assert.equal(none.code, 1, none.stdout + none.stderr);
    assert.equal(none.stdout, '');
    assertOneErrorLine(none.stderr, /authentication enabled; pass a user and password/);
    await assertNoLeases(root);
  });
});

describe('doctor over TLS', { skip: !hasOpenssl() && 'needs openssl' }, () => {
  let dir: string;
  let secure: EtcdCluster;
  let url: string;
  const file = (f: string): string => path.join(dir, f);

  before(async () => {
    // The cluster's CA and certificate for 127.0.0.1 (server and client), and a CA that signed nothing of the cluster's.
    ({ dir } = await testCerts('doctor-tls', ['other']));
    secure = await startEtcd({
      members: 1,
      tls: { certFile: file('node.pem'), keyFile: file('node.key'), trustedCaFile: file('ca.pem'), clientCertAuth: true },
    });
    url = secure.clientUrls[0]!;
  });

  after(async () => {
    await secure?.stop();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  test('the right CA and client certificate: the checks run over TLS', async () => {
    const { code, report } = await doctorJson([
      '--endpoints',
      url,
      '--cacert',
      file('ca.pem'),
      '--cert',
      file('node.pem'),
      '--key',
      file('node.key'),
      '--samples',
      '1',
    ]);
    assert.equal(code, healthyCode(secure.version), JSON.stringify(report.checks));
    assert.equal(report.members.length, 1);
    assert.equal(report.members[0]!.version, secure.version);
    assert.deepEqual(report.lease, { grant: 'ok', attach: 'ok', renew: 'ok', revoke: 'ok' });
  });

  test("a CA that did not sign the server's certificate: the CLI's one-line TLS error, exit 1", async () => {
    const r = await doctor(['--endpoints', url, '--cacert', file('other.pem'), '--cert', file('node.pem'), '--key', file('node.key')]);
    assert.equal(r.code, 1, r.stdout + r.stderr);
    assert.equal(r.stdout, '');
    assertOneErrorLine(
      r.stderr,
      /could not connect to etcd at 127\.0\.0\.1:\d+ \(TLS handshake failed: .*check the CA certificate \(--cacert\)/,
    );
  });

  test('no client certificate for a server that requires one: the one-line error says so, exit 1', async () => {
    const r = await doctor(['--endpoints', url, '--cacert', file('ca.pem')]);
    assert.equal(r.code, 1, r.stdout + r.stderr);
    assert.equal(r.stdout, '');
    assertOneErrorLine(r.stderr, /could not connect to etcd at 127\.0\.0\.1:\d+ \(.*client certificate \(--cert and --key\)/);
  });
});

describe('doctor against nothing', () => {
  test('a closed port: one clear line naming the endpoint and the refusal, exit 1', async () => {
    const port = await closedPort();
    const r = await doctor(['--endpoints', `127.0.0.1:${port}`]);
    assert.equal(r.code, 1, r.stderr);
    assert.equal(r.stdout, '');
    assertOneErrorLine(r.stderr, /connection refused/);
    assert.match(r.stderr, new RegExp(`127\\.0\\.0\\.1:${port}`));
    assert.match(r.stderr, /etcd-concurrency dev/);
    assert.match(r.stderr, /--endpoints/);
  });

  test('--help and `help doctor` print the same usage, exit codes included', async () => {
    const [a, b] = await Promise.all([doctor(['--help']), spawnHelp()]);
    assert.equal(a.code, 0, a.stderr);
    assert.match(a.stdout, /^Usage: etcd-concurrency doctor/);
    assert.match(a.stdout, /Exit status: 0 ready; 5 ready with warnings; 6 not ready/);
    assert.equal(b.stdout, a.stdout);
  });

  test('bad usage: exit 2', async () => {
    for (const [args, re] of [
      [['--samples', '0'], /--samples must be a whole number from 1 to 100/],
      [['--prefix', ''], /--prefix must not be empty/],
      [['extra'], /doctor takes no arguments/],
    ] as const) {
      const r = await doctor([...args]);
      assert.equal(r.code, 2, r.stderr);
      assertOneErrorLine(r.stderr, re);
    }
  });
});
