// A caller's deadline holds while the client is still connecting: a call's
// `signal` and `timeoutMs`, Session.create's `signal`, the dial timeout per endpoint, and the CLI's
// `lock --timeout`, against an endpoint that accepts TCP connections and never answers (the
// black-holing proxy in front of a real etcd). No test measures time: every bound other than the
// one under test is set to ten minutes, so a call ends within the test's timeout only if that bound
// holds, and the extra dials of the old code show as extra connections on a counting listener.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { createServer, type Socket } from 'node:net';
import { existsSync } from 'node:fs';
import { once } from 'node:events';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { Client, Session, UnavailableError } from '../src/index.js';
import { startProxy, type EtcdCluster, type TcpProxy } from '../src/testing/index.js';
import { etcdForFile, closedPort } from './helpers.js';

const ROOT = 'test/client-timeouts/';
let etcd: EtcdCluster;
let client: Client;
etcdForFile(ROOT, (e, c) => ((etcd = e), (client = c)));

/** A bound no test may reach: if a call needs it, the test times out and fails. */
const NEVER = 600_000;
const MAIN = path.join(path.dirname(fileURLToPath(import.meta.url)), '..', 'dist/cli/main.js');

/** A proxy in front of the real etcd that black-holes from the start: TCP is accepted, nothing answers. */
async function hung(): Promise<TcpProxy> {
  const proxy = await startProxy(etcd.endpoints[0]!);
  proxy.blackhole(true);
  return proxy;
}

/** What `p` rejected with. */
async function rejection(p: Promise<unknown>): Promise<unknown> {
  try {
    await p;
  } catch (err) {
    return err;
  }
  assert.fail('expected a rejection');
}

/** A listener that accepts TCP connections, never answers, and counts them: one per dial or probe. */
async function silentListener(): Promise<{ endpoint: string; accepted: () => number } & AsyncDisposable> {
  const sockets = new Set<Socket>();
  let accepted = 0;
  const server = createServer((socket) => {
    accepted++;
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address() as { port: number };
  return {
    endpoint: `127.0.0.1:${port}`,
    accepted: () => accepted,
    async [Symbol.asyncDispose]() {
      for (const socket of sockets) socket.destroy();
      server.close();
      await once(server, 'close');
    },
  };
}

describe('a hung endpoint while connecting', () => {
  it("a call's signal bounds the dial: rejects with the signal's reason", { timeout: 30_000 }, async () => {
    await using proxy = await hung();
    // Dial and call timeouts of ten minutes: only the signal can end the call in time.
    await using c = new Client({ endpoints: proxy.endpoint, dialTimeoutMs: NEVER });
    const signal = AbortSignal.timeout(200);
    const err = await rejection(c.get('k', { signal, timeoutMs: NEVER }));
    assert.ok(err === signal.reason, `not the signal's reason: ${String(err)}`);
    assert.equal((err as Error).name, 'TimeoutError');
  });

  it("a call's timeoutMs bounds the dial: UnavailableError saying nothing answered", { timeout: 30_000 }, async () => {
    await using proxy = await hung();
    await using c = new Client({ endpoints: proxy.endpoint, dialTimeoutMs: NEVER });
    const err = await rejection(c.get('k', { timeoutMs: 500 }));
    assert.ok(err instanceof UnavailableError, String(err));
    assert.match(err.message, /nothing answered within \d+ ms/);
  });

  it('with default call options, a hung endpoint costs one dial timeout, not a second one for a diagnosis', {
    timeout: 30_000,
  }, async () => {
    await using silent = await silentListener();
    await using c = new Client({ endpoints: silent.endpoint, dialTimeoutMs: 3000 });
    const err = await rejection(c.get('k'));
    assert.ok(err instanceof UnavailableError, String(err));
    assert.match(err.message, new RegExp(`could not connect to etcd at ${silent.endpoint.replaceAll('.', '\\.')}`));
    assert.match(err.message, /nothing answered within 3000 ms/);
    // The old code probed a silent endpoint again for its error message: a second dial timeout.
    assert.equal(silent.accepted(), 1, 'one connection: the dial, and no probe after it');
  });

  it('several hung endpoints: each costs at most the dial timeout, and the call deadline caps the round', { timeout: 30_000 }, async () => {
    await using a = await hung();
    await using b = await hung();
    await using c = new Client({ endpoints: [a.endpoint, b.endpoint], dialTimeoutMs: 2000 });
    const round = await rejection(c.get('k', { timeoutMs: NEVER }));
    assert.ok(round instanceof UnavailableError, String(round));
    assert.match(round.message, /nothing answered within 2000 ms/);
    await using slow = new Client({ endpoints: [a.endpoint, b.endpoint], dialTimeoutMs: NEVER });
    const capped = await rejection(slow.get('k', { timeoutMs: 2500 }));
    assert.ok(capped instanceof UnavailableError, String(capped));
  });

  it('a hung endpoint first, a live one second: the call fails over after one dial timeout', { timeout: 30_000 }, async () => {
    await using proxy = await hung();
    await using c = new Client({ endpoints: [proxy.endpoint, etcd.endpoints[0]!], dialTimeoutMs: 2000 });
    await c.get('k', { timeoutMs: NEVER });
    assert.equal(c.activeEndpoint, etcd.endpoints[0]);
  });

  it("Session.create's signal bounds the grant's dial, and the clean-up revoke does not dial again", { timeout: 30_000 }, async () => {
    await using proxy = await hung();
    await using c = new Client({ endpoints: proxy.endpoint, dialTimeoutMs: NEVER, callTimeoutMs: NEVER });
    const signal = AbortSignal.timeout(200);
    // The grant never left (the channel never connected), so the revoke Session.create makes after
    // a failed grant must not dial again: it used to wait out a whole dial timeout without a signal.
    const err = await rejection(Session.create(c, { ttl: 5, signal }));
    assert.ok(err === signal.reason, `not the signal's reason: ${String(err)}`);
  });

  it('Session.create with default options fails after one dial, not four', { timeout: 60_000 }, async () => {
    await using silent = await silentListener();
    await using c = new Client({ endpoints: silent.endpoint, dialTimeoutMs: 3000 });
    const err = await rejection(Session.create(c));
    assert.ok(err instanceof UnavailableError, String(err));
    assert.match(err.message, /^granting a lease: could not connect/);
    // The old code dialled for the grant, probed, then dialled and probed again for the revoke.
    assert.equal(silent.accepted(), 1, "one connection: the grant's dial");
  });

  it('a grant that never reached etcd is not revoked on an endpoint that works again', { timeout: 30_000 }, async () => {
    // The revoke after a failed grant is skipped only when the grant provably was never sent:
    // once connected, a grant and its revoke behave as before.
    await using c = new Client({ endpoints: etcd.endpoints, dialTimeoutMs: 1000 });
    const s = await Session.create(c, { ttl: 5, signal: AbortSignal.timeout(10_000) });
    assert.ok((await client.leaseLeases()).includes(s.leaseId));
    await s.close();
    assert.ok(!(await client.leaseLeases()).includes(s.leaseId));
  });

  it('the CLI: `lock --timeout 1s` on a hung endpoint exits 4 after about 1 s', { timeout: 60_000 }, async () => {
    assert.ok(existsSync(MAIN), `${MAIN} is missing: run \`npm run build\` first`);
    await using proxy = await hung();
    const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('ETCDCTL_')));
    // A dial timeout of ten minutes: only --timeout can end the command in time.
    const child = spawn(
      process.execPath,
      [MAIN, 'lock', `${ROOT}x`, '--endpoints', proxy.endpoint, '--dial-timeout', '10m', '--timeout', '1s', '--', 'true'],
      { env, stdio: ['ignore', 'pipe', 'pipe'] },
    );
    let stderr = '';
    child.stderr.setEncoding('utf8').on('data', (d: string) => (stderr += d));
    const [code] = (await once(child, 'close')) as [number | null];
    assert.equal(code, 4, stderr);
    assert.match(stderr, /^etcd-concurrency: timed out after 1s connecting to etcd at /);
    assert.equal(stderr.trimEnd().split('\n').length, 1, stderr);
  });
});

describe('error messages say what the library was doing', () => {
  it('not the RPC name: "reading from etcd", "granting a lease"', { timeout: 20_000 }, async () => {
    const port = await closedPort();
    await using c = new Client({ endpoints: `127.0.0.1:${port}`, dialTimeoutMs: 1000 });
    const read = await rejection(c.get('k'));
    assert.match((read as Error).message, /^reading from etcd: could not connect to etcd at .*connection refused/);
    const grant = await rejection(Session.create(c, { ttl: 5 }));
    assert.match((grant as Error).message, /^granting a lease: could not connect/);
    for (const err of [read, grant]) assert.doesNotMatch((err as Error).message, /Range|LeaseGrant/);
  });
});
