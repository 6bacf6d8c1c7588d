// Tests for the test harness itself: real etcd processes and the fault-injecting proxy.
// Waits are on events and promises only; nothing sleeps to let state settle.

import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import * as http from 'node:http';
import * as https from 'node:https';
import { connect, createServer, type Server, type Socket } from 'node:net';
import { once } from 'node:events';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startEtcd, startProxy, type EtcdCluster, type TcpProxy } from '../src/testing/index.js';

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

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

describe('startEtcd, single member', () => {
  test('starts healthy; stop removes the data dir and the process', async () => {
    const etcd = await startEtcd();
    const [member] = etcd.members;
    assert.ok(member?.running && member.pid);
    assert.equal(etcd.endpoints.length, 1);
    assert.match(etcd.endpoints[0]!, /^127\.0\.0\.1:\d+$/);
    assert.notEqual(etcd.endpoints[0], '127.0.0.1:2379');
    assert.equal(etcd.clientUrls[0], `http://${etcd.endpoints[0]}`);
    assert.deepEqual(await getJson(`${etcd.clientUrls[0]}/health`), { health: 'true' });
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
    assert.deepEqual(await getJson(`${etcd.clientUrls[0]}/health`, tls), { health: 'true' });
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
    assert.deepEqual(etcd.members.map((m) => m.name), ['m0', 'm1', 'm2']);
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
    assert.deepEqual(await getJson(`${etcd.clientUrls[old]}/health`), { health: 'true' });
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
    assert.deepEqual(await getJson(`${etcd.clientUrls[old]}/health`), { health: 'true' });
  });
});

describe('startProxy', () => {
  let echo: Server;
  let echoEndpoint: string;
  /** Every string the echo server received, in order, across all connections. */
  const received: string[] = [];
  const sockets = new Set<Socket>();
  let proxy: TcpProxy;

  before(async () => {
    echo = createServer((s) => {
      sockets.add(s);
      s.on('data', (d) => {
        received.push(d.toString());
        s.write(d);
      });
      s.on('error', () => {});
      s.on('end', () => s.end());
      s.on('close', () => sockets.delete(s));
    });
    echo.listen(0, '127.0.0.1');
    await once(echo, 'listening');
    echoEndpoint = `127.0.0.1:${(echo.address() as { port: number }).port}`;
    proxy = await startProxy(echoEndpoint);
  });
  after(async () => {
    await proxy.close();
    for (const s of sockets) s.destroy();
    echo.close();
    await once(echo, 'close');
  });

  /** A socket whose errors (resets are the point here) never crash the test. */
  function rawClient(endpoint = proxy.endpoint): Socket {
    const [host, port] = endpoint.split(':');
    return connect(Number(port), host).on('error', () => {});
  }

  async function client(endpoint = proxy.endpoint): Promise<Socket> {
    const s = rawClient(endpoint);
    await once(s, 'connect');
    return s;
  }

  /** Unlike once(s, 'close'), does not reject when the socket errors first. */
  const closed = (s: Socket) => new Promise<void>((resolve) => s.once('close', () => resolve()));

  /** Resolve with the first `n` bytes the socket receives. */
  function read(s: Socket, n: number): Promise<string> {
    return new Promise((resolve, reject) => {
      let buf = '';
      const onData = (d: Buffer) => {
        buf += d.toString();
        if (buf.length >= n) {
          s.off('data', onData);
          s.off('close', onClose);
          resolve(buf);
        }
      };
      const onClose = () => reject(new Error(`closed after ${JSON.stringify(buf)}`));
      s.on('data', onData);
      s.on('close', onClose);
    });
  }

  /** A round trip on a direct connection: by the time it returns, the proxy has had its turns too. */
  async function directRoundTrip(marker: string): Promise<void> {
    const s = await client(echoEndpoint);
    s.write(marker);
    assert.equal(await read(s, marker.length), marker);
    s.destroy();
  }

  test('forwards bytes both ways', async () => {
    const c = await client();
    c.write('hello');
    assert.equal(await read(c, 5), 'hello');
    assert.equal(proxy.connections, 1);
    c.end();
    await once(c, 'close');
  });

  test('cut() resets open connections and still accepts new ones', async () => {
    const c = await client();
    c.write('x');
    await read(c, 1);
    const done = closed(c);
    proxy.cut();
    await done;
    assert.equal(proxy.connections, 0);

    const again = await client();
    again.write('again');
    assert.equal(await read(again, 5), 'again');
    again.destroy();
  });

  test('blackhole(true) holds bytes without closing; blackhole(false) delivers them in order', async () => {
    const c = await client();
    c.write('before');
    assert.equal(await read(c, 6), 'before');

    proxy.blackhole(true);
    const arrived = read(c, 'held-1held-2'.length);
    await new Promise<void>((resolve) => c.write('held-1', () => resolve()));
    const fresh = await client(); // new connections are accepted too, but also stall
    fresh.write('fresh');
    await directRoundTrip('marker-1');
    c.write('held-2');
    await directRoundTrip('marker-2');
    assert.ok(!received.some((r) => r.includes('held') || r.includes('fresh')), `leaked: ${received.join('|')}`);
    assert.equal(c.destroyed, false);

    proxy.blackhole(false);
    assert.equal(await arrived, 'held-1held-2');
    assert.equal(await read(fresh, 5), 'fresh');
    c.destroy();
    fresh.destroy();
  });

  test('delay(ms) holds chunks but keeps their order', async () => {
    const c = await client();
    proxy.delay(150);
    try {
      const order: string[] = [];
      const slow = read(c, 3).then((v) => order.push(`proxied:${v}`));
      c.write('a');
      c.write('b');
      c.write('c');
      // A direct round trip sent after the proxied bytes still overtakes them.
      await directRoundTrip('direct');
      order.push('direct');
      await slow;
      assert.deepEqual(order, ['direct', 'proxied:abc']);
    } finally {
      proxy.delay(0);
    }
    c.write('now');
    assert.equal(await read(c, 3), 'now');
    c.destroy();
  });

  test('refuse(true) resets new connections but keeps open ones', async () => {
    const open = await client();
    proxy.refuse(true);
    try {
      await closed(rawClient());
      open.write('still');
      assert.equal(await read(open, 5), 'still');
    } finally {
      proxy.refuse(false);
    }
    const accepted = await client();
    accepted.write('ok');
    assert.equal(await read(accepted, 2), 'ok');
    open.destroy();
    accepted.destroy();
  });

  test('close() ends connections and is idempotent', async () => {
    const p = await startProxy(echoEndpoint);
    const c = await client(p.endpoint);
    const done = closed(c);
    await Promise.all([p.close(), p.close()]);
    await done;
    assert.equal(p.connections, 0);
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
  run('x509', '-req', '-in', f('etcd.csr'), '-CA', f('ca.crt'), '-CAkey', f('ca.key'), '-CAcreateserial',
    '-out', f('etcd.crt'), '-days', '1', '-extfile', f('ext.cnf'));
  return { certFile: f('etcd.crt'), keyFile: f('etcd.key'), trustedCaFile: f('ca.crt') };
}
