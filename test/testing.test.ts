// Tests for the test harness itself: real etcd processes, their versions, flags and ports (the
// fault-injecting proxy: testing-proxy.test.ts). Waits are on events and promises only; nothing
// sleeps to let state settle.

import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import * as http from 'node:http';
import * as https from 'node:https';
import { createServer, type Server } from 'node:net';
import { once } from 'node:events';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import {
  startEtcd,
  etcdVersion,
  etcdVersionAtLeast,
  resolveEtcd,
  EtcdFlagError,
  EtcdNotFoundError,
  EtcdPortError,
  EtcdVersionError,
  SUPPORTED_ETCD_LINES,
  type EtcdCluster,
} from '../src/testing/index.js';
import { cachedEtcds, etcdBinaryVersion } from '../src/launcher/binary.js';
import { memberArgs } from '../src/launcher/flags.js';

/** GET a JSON document without keep-alive, so no pooled socket outlives the test. */
function getJson(url: string, tls?: https.RequestOptions): Promise<unknown> {
  return new Promise((resolve, reject) => {
    const lib = url.startsWith('https:') ? https : http;
    const req = lib.get(url, { agent: false, timeout: 5000, ...tls }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => (body += chunk));
      res.on('end', () => resolve(JSON.parse(body)));
    });
    req.on('timeout', () => req.destroy(new Error(`timeout: ${url}`)));
    req.on('error', reject);
  });
}

/** /health says so (3.5 and later add a `reason` field, empty when healthy). */
async function assertHealthy(url: string, tls?: https.RequestOptions): Promise<void> {
  const body = (await getJson(url, tls)) as { health?: string };
  assert.equal(body.health, 'true', JSON.stringify(body));
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** Run `fn` with environment variables set (undefined deletes), restoring them afterwards. */
async function withEnv<T>(vars: Record<string, string | undefined>, fn: () => Promise<T>): Promise<T> {
  const saved = Object.fromEntries(Object.keys(vars).map((k) => [k, process.env[k]]));
  const apply = (v: Record<string, string | undefined>) => {
    for (const [k, val] of Object.entries(v)) {
      if (val === undefined) delete process.env[k];
      else process.env[k] = val;
    }
  };
  apply(vars);
  try {
    return await fn();
  } finally {
    apply(saved);
  }
}

/** `n` consecutive loopback ports that are free right now (bound, then released). */
async function freeRange(n: number): Promise<number> {
  for (;;) {
    const base = 20000 + Math.floor(Math.random() * 40000);
    const servers: Server[] = [];
    try {
      for (let i = 0; i < n; i++) {
        const s = createServer();
        servers.push(s);
        s.listen(base + i, '127.0.0.1');
        await once(s, 'listening');
      }
      return base;
    } catch {
      // taken: try another range
    } finally {
      for (const s of servers) s.close();
    }
  }
}

/** One of each line in the cache (the newest patch of each), oldest line first. */
const cachedLines = [...new Map((await cachedEtcds()).reverse().map((e) => [e.version.split('.').slice(0, 2).join('.'), e])).values()];

describe('etcd versions', () => {
  test('the version in use is known before and after starting', async (t) => {
    const expected = await etcdVersion();
    await using etcd = await startEtcd();
    t.diagnostic(`etcd ${etcd.version} (${etcd.etcdBinary})`);
    assert.equal(etcd.version, expected);
    assert.match(etcd.version, /^\d+\.\d+\.\d+$/);
    // The server agrees: /version answers {"etcdserver":"3.7.3","etcdcluster":"3.7.0"}.
    const v = (await getJson(`${etcd.clientUrls[0]}/version`)) as { etcdserver: string };
    assert.equal(v.etcdserver, etcd.version);
  });

  for (const install of cachedLines) {
    const line = install.version.split('.').slice(0, 2).join('.');
    test(`version '${line}' runs etcd ${install.version}, with the harness's version-specific flags`, async () => {
      // The progress-notify flag is spelled differently before 3.6; the auth-token flags are the
      // ones security.test.ts passes. etcd exits on an unknown flag, so starting at all checks them.
      await using etcd = await startEtcd({
        version: line,
        watchProgressNotifyIntervalMs: 250,
        extraArgs: ['--auth-token', 'simple', '--auth-token-ttl', '30'],
      });
      assert.equal(etcd.version, install.version);
      assert.equal(dirname(etcd.etcdBinary), dirname(install.etcd));
      assert.equal(etcd.etcdctlBinary, install.etcdctl);
      const v = (await getJson(`${etcd.clientUrls[0]}/version`)) as { etcdserver: string };
      assert.equal(v.etcdserver, install.version);
    });
  }

  test('ETCD_VERSION picks the version; an explicit version wins over it', {
    skip: cachedLines.length < 2 && 'needs two cached versions (npm run etcd -- install all)',
  }, async () => {
    const [oldest, newest] = [cachedLines[0]!, cachedLines[cachedLines.length - 1]!];
    await withEnv({ ETCD_VERSION: oldest.version }, async () => {
      assert.equal(await etcdVersion(), oldest.version);
      await using etcd = await startEtcd();
      assert.equal(etcd.version, oldest.version);
      assert.equal((await resolveEtcd({ version: newest.version })).version, newest.version);
    });
    await withEnv({ ETCD_VERSION: oldest.version.split('.').slice(0, 2).join('.') }, async () => {
      assert.equal(await etcdVersion(), oldest.version);
    });
  });

  test('by default the newest version in the cache is used', async (t) => {
    const all = await cachedEtcds();
    if (all.length === 0) return t.skip('nothing cached');
    // A private cache holding only the two oldest real installs, so the answer is known.
    const dir = mkdtempSync(join(tmpdir(), 'etcd-concurrency-cache-'));
    t.after(() => rmSync(dir, { recursive: true, force: true }));
    const two = cachedLines.slice(0, 2);
    for (const e of two) {
      mkdirSync(join(dir, e.version));
      symlinkSync(e.etcd, join(dir, e.version, 'etcd'));
      symlinkSync(e.etcdctl!, join(dir, e.version, 'etcdctl'));
    }
    // An unfinished install (a dot-dir) is never picked.
    mkdirSync(join(dir, '.9.9.9.tmp-x'));
    await withEnv({ ETCD_VERSION: undefined, ETCD_CACHE_DIR: dir }, async () => {
      const expected = two[two.length - 1]!;
      const found = await resolveEtcd();
      assert.equal(found.version, expected.version);
      assert.equal(found.source, 'cache');
      assert.equal(found.etcd, join(dir, expected.version, 'etcd'));
      assert.equal(found.etcdctl, join(dir, expected.version, 'etcdctl'));
      await using etcd = await startEtcd();
      assert.equal(etcd.version, expected.version);
    });
  });

  test('a missing version fails with what to install', async (t) => {
    const empty = mkdtempSync(join(tmpdir(), 'etcd-concurrency-cache-'));
    t.after(() => rmSync(empty, { recursive: true, force: true }));
    await withEnv({ ETCD_VERSION: undefined, ETCD_CACHE_DIR: empty }, async () => {
      // With an empty cache, only PATH (or /usr/bin/etcd) can answer: ask for a line it is not.
      const onPath = await resolveEtcd().then(
        (r) => r.version,
        () => undefined,
      );
      const fallback = existsSync('/usr/bin/etcd') ? await etcdBinaryVersion('/usr/bin/etcd').catch(() => undefined) : undefined;
      const line = SUPPORTED_ETCD_LINES.find((l) => ![onPath, fallback].some((v) => v?.startsWith(`${l}.`)))!;
      for (const attempt of [() => startEtcd({ version: line }), () => withEnv({ ETCD_VERSION: line }, () => startEtcd())]) {
        await assert.rejects(attempt(), (err: Error) => {
          assert.ok(err instanceof EtcdNotFoundError, String(err));
          assert.equal(err.requested, line);
          assert.match(err.message, new RegExp(`etcd ${line.replace('.', '\\.')} is not installed`));
          assert.ok(err.message.includes(`npm run etcd -- install ${line}`), err.message);
          return true;
        });
      }
    });
  });

  test('bad requests fail before anything starts', async () => {
    await assert.rejects(startEtcd({ version: 'latest' }), RangeError);
    await withEnv({ ETCD_VERSION: '3' }, () => assert.rejects(startEtcd(), /ETCD_VERSION must look like 3\.7 or 3\.7\.3, got "3"/));
    const { etcd, version } = await resolveEtcd();
    const other = version.startsWith('3.4.') ? '3.7' : '3.4';
    await assert.rejects(startEtcd({ etcdBinary: etcd, version: other }), (err: Error) => {
      assert.ok(err instanceof EtcdVersionError);
      assert.match(err.message, new RegExp(`is ${version.replace(/\./g, '\\.')}, but version ${other.replace('.', '\\.')} was asked for`));
      return true;
    });
  });
});

describe('flags per etcd version', () => {
  const settings = {
    name: 'm0',
    dataDir: '/d',
    clientUrl: 'http://127.0.0.1:1',
    peerUrl: 'http://127.0.0.1:2',
    initialCluster: 'm0=http://127.0.0.1:2',
    clusterToken: 't',
    watchProgressNotifyIntervalMs: 1500,
  };
  const flagValue = (args: string[], flag: string) => (args.includes(flag) ? args[args.indexOf(flag) + 1] : undefined);

  test('progress notify is experimental before 3.6, a plain flag from 3.6; no experimental flag from 3.7', () => {
    for (const v of ['3.4.23', '3.5.30']) {
      const args = memberArgs(v, settings);
      assert.equal(flagValue(args, '--experimental-watch-progress-notify-interval'), '1500ms');
      assert.ok(!args.includes('--watch-progress-notify-interval'));
    }
    for (const v of ['3.6.16', '3.7.3']) {
      const args = memberArgs(v, settings);
      assert.equal(flagValue(args, '--watch-progress-notify-interval'), '1500ms');
      assert.ok(!args.some((a) => a.startsWith('--experimental-')), args.join(' '));
    }
  });

  test('extraArgs that the version lacks are refused with the flag to use', async () => {
    const cases: [string, string[], RegExp][] = [
      [
        '3.7.3',
        ['--experimental-watch-progress-notify-interval=1s'],
        /no --experimental-watch-progress-notify-interval .*use --watch-progress-notify-interval/,
      ],
      ['3.7.3', ['--experimental-initial-corrupt-check'], /use --feature-gates=InitialCorruptCheck=true/],
      ['3.6.16', ['--enable-v2'], /no --enable-v2 \(removed in 3\.6/],
      [
        '3.4.23',
        ['--watch-progress-notify-interval', '1s'],
        /new in 3\.6\); before 3\.6 it is --experimental-watch-progress-notify-interval/,
      ],
    ];
    for (const [version, extraArgs, message] of cases) {
      const install = cachedLines.find((e) => e.version.startsWith(version.split('.').slice(0, 2).join('.')));
      if (!install) continue; // that version is not cached here
      await assert.rejects(startEtcd({ version: install.version, extraArgs }), (err: Error) => {
        assert.ok(err instanceof EtcdFlagError, String(err));
        assert.match(err.message, message);
        return true;
      });
    }
    // Deprecated but still accepted in 3.6, so not refused there.
    const v36 = cachedLines.find((e) => etcdVersionAtLeast(e.version, '3.6') && !etcdVersionAtLeast(e.version, '3.7'));
    if (v36) {
      await using etcd = await startEtcd({ version: v36.version, extraArgs: ['--experimental-compaction-batch-limit', '500'] });
      assert.equal(etcd.version, v36.version);
    }
  });
});

describe('basePort', () => {
  test('member i listens on basePort + 2i (clients) and + 2i + 1 (peers)', async () => {
    const base = await freeRange(2);
    await using etcd = await startEtcd({ basePort: base });
    assert.deepEqual(etcd.endpoints, [`127.0.0.1:${base}`]);
    assert.equal(etcd.members[0]!.peerUrl, `http://127.0.0.1:${base + 1}`);
    await assertHealthy(`${etcd.clientUrls[0]}/health`);
  });

  test('a taken port fails at once, naming the port and the member', async (t) => {
    const base = await freeRange(6);
    const blocker = createServer();
    blocker.listen(base + 3, '127.0.0.1'); // m1's peer port
    await once(blocker, 'listening');
    t.after(() => blocker.close());
    await assert.rejects(startEtcd({ members: 3, basePort: base }), (err: Error) => {
      assert.ok(err instanceof EtcdPortError, String(err));
      assert.match(err.message, new RegExp(`port ${base + 3} \\(peer port of m1\\)`));
      assert.match(err.message, /choose another basePort/);
      return true;
    });
    await assert.rejects(startEtcd({ basePort: 65535 }), RangeError);
  });

  test('`etcd-concurrency dev --etcd <version> --base-port <port>`', async () => {
    const version = await etcdVersion();
    const base = await freeRange(2);
    const child = spawn(
      process.execPath,
      ['--import', 'tsx', 'src/cli/main.ts', 'dev', '--json', '--etcd', version, '--base-port', String(base)],
      {
        stdio: ['ignore', 'pipe', 'pipe'],
      },
    );
    let stderr = '';
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    const exited = once(child, 'exit');
    const died = exited.then(([code]) => Promise.reject(new Error(`dev exited with ${code}: ${stderr}`)));
    const [line] = (await Promise.race([once(child.stdout.setEncoding('utf8'), 'data'), died])) as [string];
    const info = JSON.parse(line) as { endpoints: string[]; version: string };
    assert.deepEqual(info, { ...info, endpoints: [`127.0.0.1:${base}`], version });
    child.kill('SIGINT');
    assert.deepEqual(await exited, [0, null], stderr);
  });
});

describe('startEtcd, single member', () => {
  test('starts healthy; stop removes the data dir and the process', async () => {
    const etcd = await startEtcd();
    const [member] = etcd.members;
    assert.ok(member?.running && member.pid);
    assert.equal(etcd.endpoints.length, 1);
    assert.match(etcd.endpoints[0]!, /^127\.0\.0\.1:\d+$/);
    assert.notEqual(etcd.endpoints[0], '127.0.0.1:2379');
    assert.equal(etcd.clientUrls[0], `http://${etcd.endpoints[0]}`);
    await assertHealthy(`${etcd.clientUrls[0]}/health`);
    assert.equal(await etcd.leaderIndex(), 0);

    const pid = member.pid;
    await etcd.stop();
    await etcd.stop(); // idempotent
    assert.equal(member.running, false);
    assert.equal(isAlive(pid), false);
    assert.equal(existsSync(etcd.dataDir), false);
  });

  test('a member that cannot start fails fast with its log tail', async () => {
    await assert.rejects(startEtcd({ extraArgs: ['--no-such-flag'] }), (err: Error) => {
      assert.match(err.message, /member m0 exited with code \d+ during startup/);
      assert.match(err.message, /no-such-flag/); // from etcd's own output
      return true;
    });
  });

  test('TLS client URLs with client certificate auth', { skip: !hasOpenssl() && 'openssl not found' }, async (t) => {
    const dir = mkdtempSync(join(tmpdir(), 'etcd-concurrency-tls-'));
    t.after(() => rmSync(dir, { recursive: true, force: true }));
    const files = makeCerts(dir);
    await using etcd = await startEtcd({ tls: { ...files, clientCertAuth: true } });
    assert.match(etcd.clientUrls[0]!, /^https:\/\/127\.0\.0\.1:\d+$/);
    const tls = { ca: readFileSync(files.trustedCaFile), cert: readFileSync(files.certFile), key: readFileSync(files.keyFile) };
    await assertHealthy(`${etcd.clientUrls[0]}/health`, tls);
  });
});

describe('startEtcd, three members', () => {
  let etcd: EtcdCluster;
  before(async () => {
    etcd = await startEtcd({ members: 3 });
  });
  after(() => etcd?.stop());

  test('reports distinct endpoints and one leader', async () => {
    assert.equal(new Set(etcd.endpoints).size, 3);
    assert.deepEqual(
      etcd.members.map((m) => m.name),
      ['m0', 'm1', 'm2'],
    );
    const leader = await etcd.leaderIndex();
    assert.ok([0, 1, 2].includes(leader));
  });

  test('killing the leader elects another; restart brings it back', async () => {
    const old = await etcd.leaderIndex();
    await etcd.kill(old);
    assert.equal(etcd.members[old]!.running, false);
    const next = await etcd.leaderIndex();
    assert.notEqual(next, old);

    await etcd.restart(old);
    assert.equal(etcd.members[old]!.running, true);
    await assertHealthy(`${etcd.clientUrls[old]}/health`);
  });

  test('pausing the leader elects another; resume rejoins', async () => {
    const old = await etcd.leaderIndex();
    etcd.pause(old);
    assert.equal(etcd.members[old]!.paused, true);
    try {
      assert.notEqual(await etcd.leaderIndex(), old);
    } finally {
      etcd.resume(old);
    }
    assert.equal(etcd.members[old]!.paused, false);
    await etcd.waitHealthy();
    await assertHealthy(`${etcd.clientUrls[old]}/health`);
  });
});

function hasOpenssl(): boolean {
  try {
    execFileSync('openssl', ['version'], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

/** A throwaway CA plus one cert for 127.0.0.1 usable as both server and client identity. */
function makeCerts(dir: string): { certFile: string; keyFile: string; trustedCaFile: string } {
  const f = (name: string) => join(dir, name);
  const run = (...args: string[]) => execFileSync('openssl', args, { stdio: 'ignore' });
  writeFileSync(f('ext.cnf'), 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n');
  run('req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', f('ca.key'), '-out', f('ca.crt'), '-days', '1', '-subj', '/CN=test-ca');
  run('req', '-newkey', 'rsa:2048', '-nodes', '-keyout', f('etcd.key'), '-out', f('etcd.csr'), '-subj', '/CN=etcd');
  run(
    'x509',
    '-req',
    '-in',
    f('etcd.csr'),
    '-CA',
    f('ca.crt'),
    '-CAkey',
    f('ca.key'),
    '-CAcreateserial',
    '-out',
    f('etcd.crt'),
    '-days',
    '1',
    '-extfile',
    f('ext.cnf'),
  );
  return { certFile: f('etcd.crt'), keyFile: f('etcd.key'), trustedCaFile: f('ca.crt') };
}
