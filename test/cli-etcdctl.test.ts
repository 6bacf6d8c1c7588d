// The built CLI against etcdctl on the same names (lock and elect both ways), and its TLS and auth
// flags. Run `npm run build` first. Every wait is on a child's output line, its exit, or etcd state.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { rm } from 'node:fs/promises';
import path from 'node:path';
import type { Client } from '../src/index.js';
import { startEtcd, type EtcdCluster } from '../src/testing/index.js';
import {
  assertNoKeys,
  hasEtcdctl,
  hasOpenssl,
  assertOneErrorLine,
  cliFile,
  runCli as start,
  runCliToEnd as run,
  spawnEtcdctl,
  waitFor,
  testCerts,
} from './helpers.js';

const ROOT = 'test/cli-etcdctl/';

let client: Client;
let endpoint: string;

const { fresh, keysOf } = cliFile(ROOT, (e, c) => ((client = c), (endpoint = e.endpoints[0]!)));

/** `node -e <script>` as a command for `lock -- ...`. */
const nodeCmd = (script: string): string[] => [process.execPath, '-e', script];

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

  test("etcdctl elect --listen sees our leader; our inspect and --listen see etcdctl's", async () => {
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
    const j = JSON.parse((await run(['inspect', name, '--endpoints', endpoint, '--json'])).stdout) as {
      owner: { key: string; value: string };
    };
    assert.deepEqual({ key: j.owner.key, value: j.owner.value }, { key: ctlKey, value: 'from-etcdctl' });
    await ctl.kill();
    assert.equal(await listen.next(/./), 'no leader');
    listen.signal('SIGINT');
    assert.equal(await listen.exited, 0);
    await assertNoKeys(client, `${name}/`);
    await revokeEtcdctlLeases([leaseOf(ourKey)]);
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
    for (const args of [
      ['user', 'add', 'root:s3cret-pw'],
      ['auth', 'enable'],
    ]) {
      const r = spawnSync('etcdctl', [`--endpoints=${url}`, ...tlsArgs, ...args], {
        env: { ...process.env, ETCDCTL_API: '3' },
        encoding: 'utf8',
      });
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

  test('a server that requires a client certificate, reached without one, is diagnosed as such', async () => {
    const r = await run(['inspect', 'tls/n', '--endpoints', url, '--cacert', file('ca.pem')]);
    assert.equal(r.code, 1);
    assert.match(r.stderr, /client certificate/);
  });
});
