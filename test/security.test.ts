// TLS and authentication against real etcd: certificates made here with openssl (a CA, a server
// certificate for 127.0.0.1, a client certificate, and a second CA that signed nothing of ours),
// etcd's role-based access control set up with etcdctl, and a simple token that expires during a
// long wait (etcd 17623). No error message may carry a password or a token.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { execFile, spawnSync } from 'node:child_process';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { inspect, promisify } from 'node:util';
import {
  AuthenticationError,
  Client,
  Election,
  InvalidArgumentError,
  Mutex,
  PermissionDeniedError,
  Session,
  UnavailableError,
  type TlsOptions,
} from '../src/index.js';
import { etcdVersionAtLeast, startEtcd, type EtcdCluster } from '../src/testing/index.js';
import {
  EventLog,
  assertCleanAndStop,
  assertNoKeys,
  assertNoLeases,
  grpcHandled,
  serverState,
  track,
  uniquePrefix,
  waitFor,
  waitersBlocked,
} from './helpers.js';

/**
 * Whether etcd checks the auth token on every lease renewal (keepalive): from 3.4.42, 3.5.28, 3.6.9
 * and 3.7.0, whose EtcdServer.LeaseRenew calls checkLeaseRenew (server/etcdserver/v3_server.go,
 * etcdserver/ in 3.4; the change "guard unauthenticated endpoints with auth checks"). The releases
 * before those renew without looking at the token, 3.6.0 to 3.6.8 included although they are newer
 * than 3.5.28.
 */
function checksTokenOnRenewal(version: string): boolean {
  const [major = 0, minor = 0] = version.split('.').map(Number);
  if (major !== 3) return major > 3;
  const since: Record<number, string> = { 4: '3.4.42', 5: '3.5.28', 6: '3.6.9' };
  if (minor >= 7) return true;
  const from = since[minor];
  return from !== undefined && etcdVersionAtLeast(version, from);
}

const run = promisify(execFile);

/** For tests that must end on a refusal: far below the 60 s dial timeout they use. */
const REFUSAL_ONLY = { timeout: 15_000 };

// ------------------------------------------------------------------------------------------ TLS

interface Pki {
  dir: string;
  file: (name: string) => string;
  pem: (name: string) => Promise<Buffer>;
}

/** A throwaway PKI: CA `ca` (server and client certificates), CA `other` (signs only `stranger`). */
async function makePki(): Promise<Pki> {
  const dir = await mkdtemp(join(tmpdir(), 'etcd-concurrency-pki-'));
  const file = (name: string): string => join(dir, name);
  const ossl = (...args: string[]) => run('openssl', args, { cwd: dir });
  const ca = async (name: string) => {
    await ossl(
      'req',
      '-x509',
      '-newkey',
      'rsa:2048',
      '-nodes',
      '-sha256',
      '-days',
      '2',
      '-subj',
      `/CN=${name}`,
      '-keyout',
      `${name}.key`,
      '-out',
      `${name}.crt`,
    );
  };
  const leaf = async (name: string, signer: string, ext: string) => {
    await writeFile(file(`${name}.ext`), ext);
    await ossl('req', '-newkey', 'rsa:2048', '-nodes', '-sha256', '-subj', `/CN=${name}`, '-keyout', `${name}.key`, '-out', `${name}.csr`);
    await ossl(
      'x509',
      '-req',
      '-sha256',
      '-days',
      '2',
      '-in',
      `${name}.csr`,
      '-CA',
      `${signer}.crt`,
      '-CAkey',
      `${signer}.key`,
      '-CAcreateserial',
      '-extfile',
      `${name}.ext`,
      '-out',
      `${name}.crt`,
    );
  };
  await ca('ca');
  await ca('other');
  // The harness's health checks present the server certificate as a client one: allow both uses.
  await leaf('server', 'ca', 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n');
  await leaf('client', 'ca', 'extendedKeyUsage=clientAuth\n');
  await leaf('stranger', 'other', 'extendedKeyUsage=clientAuth\n');
  return { dir, file, pem: (name) => readFile(file(name)) };
}

describe('TLS with client-certificate authentication', () => {
  let pki: Pki;
  let etcd: EtcdCluster;
  let endpoint: string;
  let good: TlsOptions;
  let admin: Client;
  const ROOT = 'test/security/tls/';

  before(async () => {
    pki = await makePki();
    etcd = await startEtcd({
      tls: { certFile: pki.file('server.crt'), keyFile: pki.file('server.key'), trustedCaFile: pki.file('ca.crt'), clientCertAuth: true },
    });
    endpoint = `https://${etcd.endpoints[0]}`;
    good = { ca: await pki.pem('ca.crt'), cert: await pki.pem('client.crt'), key: await pki.pem('client.key') };
    admin = new Client({ endpoints: endpoint, tls: good });
  });

  after(async () => {
    try {
      await assertCleanAndStop(admin, etcd, ROOT);
    } finally {
      if (pki) await rm(pki.dir, { recursive: true, force: true });
    }
  });

  /**
   * The call's rejection, checked to be a clear UnavailableError. The dial timeout is far above the
   * test's own (REFUSAL_ONLY): a test that passes was ended by the refusal its message names, never
   * by waiting out the dial.
   */
  async function refused(tls: TlsOptions | undefined, ep = endpoint): Promise<UnavailableError> {
    const c = new Client({ endpoints: ep, dialTimeoutMs: 60_000, ...(tls ? { tls } : {}) });
    try {
      await c.get(`${ROOT}k`);
    } catch (err) {
      assert.ok(err instanceof UnavailableError, `expected UnavailableError, got ${inspect(err)}`);
      assert.doesNotMatch(err.message, /nothing answered/, 'refused, not timed out');
      return err;
    } finally {
      await c.close();
    }
    assert.fail('the call succeeded');
  }

  it('with the right CA and a client certificate: locks, campaigns, and cleans up', async () => {
    const p = `${ROOT}${uniquePrefix('ok').slice('test/'.length)}`;
    const c = new Client({ endpoints: endpoint, tls: good });
    const s = await Session.create(c, { ttl: 10 });
    try {
      const h = await new Mutex(s, `${p}lock`).lock();
      assert.equal((await c.get(h.key))?.createRevision, h.fencingToken);
      await h.unlock();
      const l = await new Election(s, `${p}election`).campaign('tls');
      await l.resign();
    } finally {
      await s.close();
      await c.close();
    }
    await assertNoKeys(admin, p);
  });

  it('without the CA (system roots): a TLS error that says to pass the CA certificate', REFUSAL_ONLY, async () => {
    const err = await refused({ cert: good.cert!, key: good.key! });
    assert.match(err.message, /TLS/);
    assert.match(err.message, /CA certificate/);
    assert.match(err.message, /unable to verify|self.signed|certificate/);
  });

  it('with a CA that did not sign the server certificate: the same clear TLS error', REFUSAL_ONLY, async () => {
    const err = await refused({ ca: await pki.pem('other.crt'), cert: good.cert!, key: good.key! });
    assert.match(err.message, /TLS handshake failed/);
    assert.match(err.message, /CA certificate/);
  });

  it('plain http:// to a TLS port: the error says to use https:// and the CA', REFUSAL_ONLY, async () => {
    const err = await refused(undefined, etcd.endpoints[0]!);
    assert.match(err.message, /https:\/\//);
    assert.match(err.message, /CA/);
  });

  it('a client certificate without its key (or the reverse) is refused before dialling', () => {
    assert.throws(() => new Client({ endpoints: endpoint, tls: { ca: good.ca!, cert: good.cert! } }), InvalidArgumentError);
    assert.throws(() => new Client({ endpoints: endpoint, tls: { ca: good.ca!, key: good.key! } }), InvalidArgumentError);
  });

  it('without a client certificate: the error says the server requires one (tls.cert and tls.key)', REFUSAL_ONLY, async () => {
    const err = await refused({ ca: good.ca! });
    assert.match(err.message, /client certificate/i);
  });

  it('with a client certificate from another CA: the error says the server rejected the client certificate', REFUSAL_ONLY, async () => {
    const err = await refused({ ca: good.ca!, cert: await pki.pem('stranger.crt'), key: await pki.pem('stranger.key') });
    assert.match(err.message, /client certificate/i);
  });
});

describe('TLS with only a CA on the client, against a server that asks for no client certificate', () => {
  let pki: Pki;
  let etcd: EtcdCluster;
  let admin: Client;
  const ROOT = 'test/security/ca-only/';

  before(async () => {
    pki = await makePki();
    etcd = await startEtcd({
      tls: { certFile: pki.file('server.crt'), keyFile: pki.file('server.key'), trustedCaFile: pki.file('ca.crt') },
      // The harness always passes --trusted-ca-file (its own health checks verify the server with it),
      // and with one etcd asks every client for a certificate (3.4 even requires it). The empty value,
      // last on the command line, leaves the server with a certificate and no client CA: it asks for none.
      extraArgs: ['--trusted-ca-file='],
    });
    admin = new Client({ endpoints: `https://${etcd.endpoints[0]}`, tls: { ca: await pki.pem('ca.crt') } });
  });

  after(async () => {
    try {
      await assertCleanAndStop(admin, etcd, ROOT);
    } finally {
      if (pki) await rm(pki.dir, { recursive: true, force: true });
    }
  });

  it('the server really asks for no client certificate (no CertificateRequest in the handshake)', async () => {
    // stdin closed at once: s_client completes the handshake, prints it, and exits.
    const { stdout } = spawnSync('openssl', ['s_client', '-connect', etcd.endpoints[0]!, '-CAfile', pki.file('ca.crt')], {
      input: '',
      encoding: 'utf8',
      timeout: 20_000,
    });
    assert.match(stdout, /Verify return code: 0 \(ok\)/, stdout);
    assert.match(stdout, /No client certificate CA names sent/, stdout);
    // Printed only when the server sent a CertificateRequest (the harness's default TLS setup does).
    assert.doesNotMatch(stdout, /Requested Signature Algorithms/, stdout);
  });

  for (const [how, endpoint] of [
    ['an https:// endpoint', () => `https://${etcd.endpoints[0]}`],
    ['a host:port endpoint (the CA alone turns TLS on)', () => etcd.endpoints[0]!],
  ] as const) {
    it(`with ${how} and only tls.ca: a session, a lock, a campaign and a watch work, and nothing is left`, {
      timeout: 30_000,
    }, async () => {
      const p = `${ROOT}${uniquePrefix('ok').slice('test/'.length)}`;
      await using c = new Client({ endpoints: endpoint(), tls: { ca: await pki.pem('ca.crt') } });
      // A unary call first: were the connection broken, it fails within the dial timeout, where a
      // watch would keep retrying until the test's timeout.
      const s = await Session.create(c, { ttl: 10 });
      const log = new EventLog(c, p);
      try {
        await log.ready;
        const h = await new Mutex(s, `${p}lock`).lock();
        assert.equal((await admin.get(h.key))?.createRevision, h.fencingToken);
        await h.unlock();
        const l = await new Election(s, `${p}election`).campaign('ca-only');
        await log.put(l.key);
        await l.resign();
        await log.deleted(l.key);
      } finally {
        await s.close();
        await log.close();
      }
      await assertNoKeys(admin, p);
    });
  }
});

// ------------------------------------------------------------------------------------------ auth

const ROOT_PASSWORD = 'r00t-Pw-1b9e64';
const ALICE_PASSWORD = 'al1ce-Pw-73c2d0';
const TOKEN_TTL_S = 2;

/**
 * Resolves once every simple token that etcd issued before the call, and that nobody used since,
 * has expired. etcd announces no expiry, and a token's use renews it, so this asks with probe
 * tokens of its own (etcd's JSON gateway: Authenticate, then a Range), each used once, issued now:
 * the first one refused as an invalid token has expired, and so has every token last used before
 * it was issued. A batch covers more than the token TTL; another follows if all were still valid.
 */
async function tokensExpired(clientUrl: string, name: string, password: string): Promise<void> {
  const post = (path: string, body: unknown, token?: string): Promise<Response> =>
    fetch(`${clientUrl}${path}`, {
      method: 'POST',
      headers: token ? { authorization: token } : {},
      body: JSON.stringify(body),
    });
  const issue = async (): Promise<string> => {
    const res = await post('/v3/auth/authenticate', { name, password });
    const { token } = (await res.json()) as { token?: string };
    if (!token) throw new Error(`no token from etcd's gateway (HTTP ${res.status})`);
    return token;
  };
  const intervalMs = 250;
  const batch = Math.ceil(((TOKEN_TTL_S + 2) * 1000) / intervalMs);
  const probes: string[] = [];
  await waitFor(
    async () => {
      if (probes.length === 0) probes.push(...(await Promise.all(Array.from({ length: batch }, issue))));
      const res = await post('/v3/kv/range', { key: Buffer.from('locks/').toString('base64') }, probes.shift());
      const text = await res.text();
      if (res.ok) return false;
      if (/invalid auth token/.test(text)) return true;
      throw new Error(`a probe token was refused for another reason: HTTP ${res.status} ${text}`);
    },
    'the auth tokens to expire',
    { intervalMs, limitMs: 30_000 },
  );
}

/** Everything an error shows: message, stack, and every cause, deeply. */
function everythingShown(err: unknown): string {
  return `${String(err)}\n${inspect(err, { depth: 8, showHidden: true })}`;
}

describe('authentication and role-based access', () => {
  let etcd: EtcdCluster;
  let url: string;
  let root: Client;
  let alice: Client;
  const errors: unknown[] = [];
  const tokens = new Set<string>();
  /** Keeps an error for the final secrets check, with the tokens the clients hold right now. */
  const keep = (e: unknown): void => {
    errors.push(e);
    for (const c of [alice, root]) {
      const t = (c?.conn.tokens as unknown as { current?: string } | undefined)?.current;
      if (t) tokens.add(t);
    }
  };

  before(async () => {
    etcd = await startEtcd({ extraArgs: ['--auth-token', 'simple', '--auth-token-ttl', String(TOKEN_TTL_S)] });
    url = etcd.clientUrls[0]!;
    const ctl = (...args: string[]) =>
      run('etcdctl', [`--endpoints=${etcd.endpoints[0]}`, ...args], { env: { ...process.env, ETCDCTL_API: '3' } });
    await ctl('user', 'add', `root:${ROOT_PASSWORD}`, '--interactive=false');
    await ctl('user', 'add', `alice:${ALICE_PASSWORD}`, '--interactive=false');
    await ctl('role', 'add', 'locker');
    await ctl('role', 'grant-permission', 'locker', '--prefix=true', 'readwrite', 'locks/');
    await ctl('user', 'grant-role', 'alice', 'locker');
    await ctl('auth', 'enable');
    root = new Client({ endpoints: etcd.endpoints, auth: { username: 'root', password: ROOT_PASSWORD } });
    alice = new Client({ endpoints: etcd.endpoints, auth: { username: 'alice', password: ALICE_PASSWORD } });
  });

  after(async () => {
    try {
      await assertNoKeys(root, 'locks/');
      await assertNoKeys(root, 'other/');
      await assertNoLeases(root);
      // The whole point: nothing we showed the user carries a secret.
      keep(undefined);
      assert.ok(tokens.size > 0, 'the clients held tokens');
      assert.ok(errors.length >= 6, `collected ${errors.length} errors`);
      for (const err of errors) {
        const shown = everythingShown(err);
        assert.ok(!shown.includes(ALICE_PASSWORD) && !shown.includes(ROOT_PASSWORD), `a password leaked: ${shown}`);
        for (const token of tokens) assert.ok(!shown.includes(token), `a token leaked: ${shown}`);
        assert.doesNotMatch(shown, /wrong-pass-\d+/, `a wrong password leaked: ${shown}`);
      }
    } finally {
      await alice?.close();
      await root?.close();
      await etcd?.stop();
    }
  });

  it('a user whose role grants readwrite on "locks/" can lock and campaign there', async () => {
    const p = `locks/${uniquePrefix('alice').slice('test/'.length)}`;
    const s = await Session.create(alice, { ttl: 10 });
    try {
      const h = await new Mutex(s, `${p}lock`).lock();
      await h.unlock();
      const l = await new Election(s, `${p}election`).campaign('alice');
      await l.resign();
    } finally {
      await s.close();
    }
  });

  it('elsewhere: a clear PermissionDeniedError, nothing left behind, and no secret in the message', async () => {
    const s = await Session.create(alice, { ttl: 10 });
    try {
      const locking = new Mutex(s, 'other/lock').lock();
      await assert.rejects(locking, (e: unknown) => {
        keep(e);
        return e instanceof PermissionDeniedError && /permission denied/.test(e.message) && /grant/.test(e.message);
      });
      await assert.rejects(alice.get('other/x'), (e: unknown) => {
        keep(e);
        return e instanceof PermissionDeniedError;
      });
      await assert.rejects(new Election(s, 'other/election').campaign('x'), (e: unknown) => {
        keep(e);
        return e instanceof PermissionDeniedError;
      });
    } finally {
      await s.close();
    }
  });

  it('a wrong password: AuthenticationError that names neither password', async () => {
    const c = new Client({ endpoints: etcd.endpoints, auth: { username: 'alice', password: `wrong-pass-${process.pid}` } });
    try {
      await assert.rejects(c.get('locks/x'), (e: unknown) => {
        keep(e);
        return e instanceof AuthenticationError && /wrong user name or password/.test(e.message);
      });
      await assert.rejects(Session.create(c, { ttl: 5 }), (e: unknown) => {
        keep(e);
        return e instanceof AuthenticationError;
      });
    } finally {
      await c.close();
    }
  });

  it('an empty user name is refused before anything is sent', () => {
    assert.throws(
      () => new Client({ endpoints: etcd.endpoints, auth: { username: '', password: ALICE_PASSWORD } }),
      (e: unknown) => {
        keep(e);
        return e instanceof InvalidArgumentError;
      },
    );
  });

  it('no credentials against an auth-enabled etcd: AuthenticationError saying to pass a user and password', async () => {
    const c = new Client({ endpoints: etcd.endpoints });
    try {
      await assert.rejects(c.get('locks/x'), (e: unknown) => {
        keep(e);
        assert.ok(e instanceof AuthenticationError, `got ${String(e)}`);
        assert.match(e.message, /auth/);
        return true;
      });
    } finally {
      await c.close();
    }
  });

  it('a token that expires between renewals is replaced: the keepalive stream reopens with a new one and the session lives', {
    timeout: 60_000,
  }, async () => {
    // etcd 3.4.42+, 3.5.28+, 3.6.9+ and 3.7 check the token on every renewal. Renewals every 3 s and
    // a 2 s token TTL: each renewal meets an expired token. Reopening the stream with the same token
    // again lost the session once the lease ran out.
    const s = await Session.create(alice, { ttl: 9 });
    try {
      const authBefore = await grpcHandled(url, 'Authenticate');
      let renewals = 0;
      let left = s.remainingMs();
      await waitFor(
        () => {
          if (s.signal.aborted) throw new Error(`the session was lost: ${String(s.signal.reason)}`);
          const now = s.remainingMs();
          if (now > left) renewals++;
          left = now;
          return renewals >= 4 || undefined;
        },
        'four renewals, each after the token expired',
        { intervalMs: 50, limitMs: 40_000 },
      );
      assert.equal(s.signal.aborted, false);
      const t = await root.leaseTimeToLive(s.leaseId);
      assert.ok(t.ttl > 0, `lease ${s.leaseId} is gone`);
      if (checksTokenOnRenewal(etcd.version)) {
        assert.ok((await grpcHandled(url, 'Authenticate')) > authBefore, 'the expired token was replaced');
      }
    } finally {
      await s.close();
    }
  });

  it('a token that expires during a long wait is fetched again, and the waiter gets the lock (etcd 17623)', {
    timeout: 60_000,
  }, async () => {
    const p = `locks/${uniquePrefix('token').slice('test/'.length)}`;
    const name = `${p}lock`;
    const [r1, r2] = [await Session.create(root, { ttl: 30 }), await Session.create(root, { ttl: 30 })];
    const s = await Session.create(alice, { ttl: 30 }); // next renewal in 10 s: nothing touches the token meanwhile
    const log = new EventLog(root, `${name}/`);
    try {
      await log.ready;
      const first = await new Mutex(r1, name).lock();
      const watchers = (await serverState(url)).watchers;
      // Queue in this order: root's second waiter, then alice's.
      const m2 = new Mutex(r2, name);
      const second = track(m2.lock());
      await log.put(m2.key);
      const m3 = new Mutex(s, name);
      const mine = track(m3.lock());
      await log.put(m3.key);
      // Both clients sit idle in their waits (nothing in flight) until their tokens have expired.
      await waitersBlocked(url, watchers, 2, 'both waiters blocked on their watches');
      await tokensExpired(url, 'root', ROOT_PASSWORD);
      const authBefore = await grpcHandled(url, 'Authenticate'); // after the probes' own
      // The next holder's turn: its lookup and new watch go out with an expired token.
      await first.unlock();
      const h2 = await second.promise;
      // And ours: one more lookup and a watch created on a stream opened with the expired token.
      await h2.unlock();
      const h3 = await mine.promise;
      h3.assertHeld();
      await h3.unlock();
      assert.ok((await grpcHandled(url, 'Authenticate')) > authBefore, 'the expired token was replaced');
      assert.equal(s.signal.aborted, false);
    } finally {
      await log.close();
      await Promise.all([r1.close(), r2.close(), s.close()]);
    }
  });
});
