// Tests for the test harness's fault-injecting proxy (startProxy) in front of real etcd processes.
// Waits are on events and promises only; nothing sleeps to let state settle.

import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { connect, createServer, type Server, type Socket } from 'node:net';
import { once } from 'node:events';
import { startProxy, type TcpProxy } from '../src/testing/index.js';

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
