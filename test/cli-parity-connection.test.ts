// The command line at par with etcdctl: every etcdctl connection flag with its ETCDCTL_* variable
// against a TLS cluster with authentication. --discovery-srv is resolved by a small DNS server this
// file starts on loopback (node:dgram); the CLI is pointed at it with a preloaded module that calls
// dns.setServers (NODE_OPTIONS=--import), so the CLI itself has no test-only hook.
// Run `npm run build` first. Every wait is on an output line, an exit, or etcd state.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { createSocket, type Socket } from 'node:dgram';
import { readFileSync } from 'node:fs';
import { rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { Client } from '../src/index.js';
import { startEtcd, type EtcdCluster } from '../src/testing/index.js';
import { hasEtcdctl, hasOpenssl, assertOneErrorLine, cliFile, runCli as start, runCliToEnd as run, testCerts, within } from './helpers.js';

const ROOT = 'test/cli-parity-connection/';

let endpoint: string;

const { fresh } = cliFile(ROOT, (e) => (endpoint = e.endpoints[0]!));

const esc = (s: string): string => s.replace(/[.*+?^${}()|[\]\\/]/g, '\\$&');

describe('etcdctl connection flags and ETCDCTL_* variables', () => {
  test("a flag and its variable together are refused (etcdctl's rule); unknown and unsupported variables warn", async () => {
    const both = await run(['inspect', 'x', '--endpoints', endpoint], { ETCDCTL_ENDPOINTS: endpoint });
    assert.equal(both.code, 2);
    assertOneErrorLine(both.stderr, /--endpoints and ETCDCTL_ENDPOINTS are both set; unset the variable or drop the flag/);
    const dbg = await run(['inspect', 'x', '--endpoints', endpoint, '--debug'], { ETCDCTL_DEBUG: 'true' });
    assert.equal(dbg.code, 2);
    assert.match(dbg.stderr, /--debug and ETCDCTL_DEBUG are both set/);
    const env = { ETCDCTL_ENDPOINTS: endpoint, ETCDCTL_WRITE_OUT: 'json', ETCDCTL_NOT_A_FLAG: '1', ETCDCTL_API: '3' };
    const r = await run(['inspect', `${ROOT}nothing`], env);
    assert.equal(r.code, 0, r.stderr);
    assert.deepEqual(r.stderr.trimEnd().split('\n'), [
      'etcd-concurrency: unrecognized environment variable ETCDCTL_NOT_A_FLAG ignored',
      "etcd-concurrency: ETCDCTL_WRITE_OUT ignored: etcd-concurrency has no equivalent of etcdctl's --write-out (use --json where a command has it)",
    ]);
    const keep = await run(['inspect', `${ROOT}nothing`, '--keepalive-time', '20s'], {
      ETCDCTL_ENDPOINTS: endpoint,
      ETCDCTL_KEEPALIVE_TIMEOUT: '5s',
    });
    assert.equal(keep.code, 0, keep.stderr);
    assert.equal(keep.stderr, '', 'both applied, nothing to warn about');
    const zero = await run(['inspect', `${ROOT}nothing`, '--keepalive-time', '0s'], { ETCDCTL_ENDPOINTS: endpoint });
    assert.equal(zero.code, 2, zero.stderr);
    const badBool = await run(['inspect', 'x', '--insecure-transport=maybe']);
    assert.equal(badBool.code, 2);
    assertOneErrorLine(badBool.stderr, /--insecure-transport must be true or false, got "maybe"/);
  });

  test('--insecure-transport=false (or ETCDCTL_INSECURE_TRANSPORT=false) speaks TLS even to host:port', async () => {
    for (const [args, env] of [
      [['--insecure-transport=false'], {}],
      [[], { ETCDCTL_INSECURE_TRANSPORT: 'false' }],
    ] as const) {
      const r = await run(['inspect', `${ROOT}nothing`, '--endpoints', endpoint, ...args], env);
      // A plaintext etcd cannot answer a TLS handshake: the command fails instead of connecting.
      assert.equal(r.code, 1, `${JSON.stringify(env)}: ${r.stderr}`);
      assert.match(r.stderr, /could not connect to etcd/);
    }
    const plain = await run(['inspect', `${ROOT}nothing`, '--endpoints', endpoint, '--insecure-transport=true', '--dial-timeout', '3s']);
    assert.equal(plain.code, 0, plain.stderr);
  });

  test('--command-timeout (and ETCDCTL_COMMAND_TIMEOUT) bounds a request to a hung etcd', async () => {
    const own = await startEtcd({ members: 1 });
    try {
      own.pause(0);
      for (const [args, env] of [
        [['--endpoints', own.endpoints[0]!, '--command-timeout', '300ms'], {}],
        [[], { ETCDCTL_ENDPOINTS: own.endpoints[0]!, ETCDCTL_COMMAND_TIMEOUT: '300ms' }],
      ] as const) {
        // --dial-timeout 60s: only the command timeout can end this before the hang guard.
        const p = start(['inspect', 'x', '--dial-timeout', '60s', ...args], { env });
        const code = await within(p.exited, 'the command timeout to end the command (still running)', 15_000);
        assert.equal(code, 1, `wrong exit: ${p.stderr()}`);
        // The deadline reported is the command timeout's (300 ms), not the dial timeout's (60 s).
        const ms = Number(/within (\d+) ms/.exec(p.stderr())?.[1]);
        assert.ok(ms <= 300, p.stderr());
      }
    } finally {
      own.resume(0);
      await own.stop();
    }
  });

  describe('against a TLS cluster with authentication', { skip: !(hasOpenssl() && hasEtcdctl()) && 'needs openssl and etcdctl' }, () => {
    let dir: string;
    let secure: EtcdCluster;
    let url: string;
    let dns: Socket;
    let dnsPort: number;
    let preload: string;
    const queries: string[] = [];
    /** SRV answers by name: [target, port]. */
    const srv = new Map<string, [string, number][]>();
    const file = (f: string): string => path.join(dir, f);
    const tls = (): string[] => ['--cacert', file('ca.pem'), '--cert', file('node.pem'), '--key', file('node.key')];

    before(async () => {
      const certs = await testCerts('cli-parity-tls');
      dir = certs.dir;
      const openssl = certs.openssl;
      // JWT auth tokens (etcd --auth-token jwt), signed with a throwaway RSA key.
      openssl(['genrsa', '-out', 'jwt.key', '2048']);
      openssl(['rsa', '-in', 'jwt.key', '-pubout', '-out', 'jwt.pub']);
      secure = await startEtcd({
        members: 1,
        tls: { certFile: file('node.pem'), keyFile: file('node.key'), trustedCaFile: file('ca.pem'), clientCertAuth: true },
        extraArgs: [`--auth-token=jwt,pub-key=${file('jwt.pub')},priv-key=${file('jwt.key')},sign-method=RS256,ttl=10m`],
      });
      url = secure.clientUrls[0]!;
      for (const args of [
        ['user', 'add', 'root:s3cret-pw'],
        ['auth', 'enable'],
      ]) {
        const r = spawnSync(
          'etcdctl',
          [`--endpoints=${url}`, `--cacert=${file('ca.pem')}`, `--cert=${file('node.pem')}`, `--key=${file('node.key')}`, ...args],
          {
            env: { ...process.env, ETCDCTL_API: '3' },
            encoding: 'utf8',
          },
        );
        assert.equal(r.status, 0, r.stderr);
      }
      // The DNS server: SRV answers from `srv`, NXDOMAIN for anything else; every question is logged.
      dns = createSocket('udp4');
      dns.on('message', (msg, from) => {
        const { name, end } = readName(msg, 12);
        queries.push(name);
        const answers = msg.readUInt16BE(end) === 33 ? (srv.get(name) ?? []) : [];
        dns.send(dnsAnswer(msg, end + 4, answers), from.port, from.address);
      });
      await new Promise<void>((resolve) => dns.bind(0, '127.0.0.1', resolve));
      dnsPort = dns.address().port;
      preload = file('dns.mjs');
      await writeFile(preload, `import dns from 'node:dns';\ndns.setServers(['127.0.0.1:${dnsPort}']);\n`);
    });

    after(async () => {
      dns?.close();
      await secure?.stop();
      if (dir) await rm(dir, { recursive: true, force: true });
    });

    /** A token etcd issued for root (a JWT with --auth-token jwt). */
    async function issuedToken(): Promise<string> {
      const c = new Client({
        endpoints: [url],
        tls: { ca: readFileSync(file('ca.pem')), cert: readFileSync(file('node.pem')), key: readFileSync(file('node.key')) },
        auth: { username: 'root', password: 's3cret-pw' },
      });
      try {
        const t = await c.conn.tokens!.token();
        assert.ok(t, 'no token');
        return t;
      } finally {
        await c.close();
      }
    }

    test('every TLS and auth flag works as a flag and as its ETCDCTL_* variable', async () => {
      const name = fresh('tls');
      const viaFlags = await run([
        'lock',
        name,
        '--endpoints',
        url,
        ...tls(),
        '--user',
        'root',
        '--password',
        's3cret-pw',
        '--dial-timeout',
        '5s',
        '--command-timeout',
        '20s',
        '--',
        'true',
      ]);
      assert.equal(viaFlags.code, 0, viaFlags.stderr);
      assert.equal(viaFlags.stderr, '');
      const env = {
        ETCDCTL_ENDPOINTS: url,
        ETCDCTL_CACERT: file('ca.pem'),
        ETCDCTL_CERT: file('node.pem'),
        ETCDCTL_KEY: file('node.key'),
        ETCDCTL_USER: 'root:s3cret-pw',
        ETCDCTL_DIAL_TIMEOUT: '5s',
        ETCDCTL_COMMAND_TIMEOUT: '20s',
        ETCDCTL_INSECURE_TRANSPORT: 'true',
      };
      const viaEnv = await run(['lock', name, '--', 'true'], env);
      assert.equal(viaEnv.code, 0, viaEnv.stderr);
      assert.equal(viaEnv.stderr, '');
      // A bad value in a variable is reported under the variable's name.
      const bad = await run(['inspect', name], { ...env, ETCDCTL_DIAL_TIMEOUT: 'soon' });
      assert.equal(bad.code, 2);
      assertOneErrorLine(bad.stderr, /ETCDCTL_DIAL_TIMEOUT must be a duration.*got "soon"/);
    });

    test('--auth-jwt-token (and ETCDCTL_AUTH_JWT_TOKEN) authenticates with a JWT etcd issued; a bad one fails in one line', async () => {
      const jwt = await issuedToken();
      assert.match(jwt, /^[\w-]+\.[\w-]+\.[\w-]+$/, 'etcd issued a JWT');
      const name = fresh('jwt');
      const flag = await run(['lock', name, '--endpoints', url, ...tls(), '--auth-jwt-token', jwt, '--', 'true']);
      assert.equal(flag.code, 0, flag.stderr);
      const env = await run(['inspect', name, '--endpoints', url, ...tls()], { ETCDCTL_AUTH_JWT_TOKEN: jwt });
      assert.equal(env.code, 0, env.stderr);
      const forged = `${jwt.slice(0, jwt.lastIndexOf('.'))}.AAAA`;
      const bad = await run(['inspect', name, '--endpoints', url, ...tls(), '--auth-jwt-token', forged]);
      assert.equal(bad.code, 1);
      assertOneErrorLine(bad.stderr, /etcd refused the --auth-jwt-token \(invalid or expired\)/);
      assert.doesNotMatch(bad.stderr, new RegExp(esc(forged)));
      const none = await run(['inspect', name, '--endpoints', url, ...tls()]);
      assert.equal(none.code, 1, 'without credentials the cluster refuses: the token above was what let us in');
    });

    test('--insecure-skip-tls-verify connects to a server whose CA we were not given, with a warning; without it the server is refused', async () => {
      const args = [
        'inspect',
        `${ROOT}skip`,
        '--endpoints',
        url,
        '--cert',
        file('node.pem'),
        '--key',
        file('node.key'),
        '--user',
        'root:s3cret-pw',
      ];
      const refused = await run(args);
      assert.equal(refused.code, 1, 'unverified server refused without the flag');
      const r = await run([...args, '--insecure-skip-tls-verify']);
      assert.equal(r.code, 0, r.stderr);
      assert.match(r.stderr, /--insecure-skip-tls-verify: the servers' certificates are not verified/);
      const env = await run(args, { ETCDCTL_INSECURE_SKIP_TLS_VERIFY: 'true' });
      assert.equal(env.code, 0, env.stderr);
    });

    test('--discovery-srv finds the endpoints in DNS SRV records as etcdctl does (-ssl, --discovery-srv-name, --insecure-discovery)', async () => {
      const port = Number(new URL(url).port);
      const plainPort = Number(endpoint.split(':')[1]);
      srv.set('_etcd-client-ssl._tcp.secure.test', [['127.0.0.1', port]]);
      srv.set('_etcd-client._tcp.plain.test', [['127.0.0.1', plainPort]]);
      srv.set('_etcd-client-ssl-blue._tcp.named.test', [['127.0.0.1', port]]);
      srv.set('_etcd-client._tcp.mixed.test', [['127.0.0.1', plainPort]]);
      srv.set('_etcd-client-ssl._tcp.mixed.test', [['127.0.0.1', port]]);
      const env = { NODE_OPTIONS: `--import=${preload}` };
      const auth = [...tls(), '--user', 'root:s3cret-pw'];

      const secureRun = await run(['inspect', `${ROOT}srv`, '--discovery-srv', 'secure.test', ...auth, '--json'], env);
      assert.equal(secureRun.code, 0, secureRun.stderr);
      assert.ok(
        queries.includes('_etcd-client-ssl._tcp.secure.test') && queries.includes('_etcd-client._tcp.secure.test'),
        queries.join(' '),
      );

      const plainRun = await run(['inspect', `${ROOT}srv`, '--json'], { ...env, ETCDCTL_DISCOVERY_SRV: 'plain.test' });
      assert.equal(plainRun.code, 0, plainRun.stderr);

      const named = await run(['inspect', `${ROOT}srv`, '--discovery-srv', 'named.test', '--discovery-srv-name', 'blue', ...auth], env);
      assert.equal(named.code, 0, named.stderr);
      assert.ok(queries.includes('_etcd-client-blue._tcp.named.test'), queries.join(' '));

      // Both kinds found: the TLS ones are used (our client does not mix schemes), with a warning.
      const mixed = await run(['inspect', `${ROOT}srv`, '--discovery-srv', 'mixed.test', ...auth], env);
      assert.equal(mixed.code, 0, mixed.stderr);
      assert.match(mixed.stderr, /ignoring discovered insecure endpoints http:\/\/127\.0\.0\.1:\d+/);

      const strict = await run(['inspect', `${ROOT}srv`, '--discovery-srv', 'plain.test', '--insecure-discovery=false'], env);
      assert.equal(strict.code, 1);
      assert.match(strict.stderr, /ignoring discovered insecure endpoint http:\/\/127\.0\.0\.1:\d+ \(--insecure-discovery=false\)/);
      assert.match(strict.stderr, /DNS lists no usable etcd endpoint/);

      const missing = await run(['inspect', `${ROOT}srv`, '--discovery-srv', 'nowhere.test'], env);
      assert.equal(missing.code, 1);
      assertOneErrorLine(
        missing.stderr,
        /--discovery-srv nowhere\.test: no etcd endpoints in DNS \(_etcd-client-ssl\._tcp\.nowhere\.test: ENOTFOUND; _etcd-client\._tcp\.nowhere\.test: ENOTFOUND\)/,
      );

      // A lock through discovery, end to end.
      const name = fresh('srv-lock');
      const locked = await run(['lock', name, '--discovery-srv', 'secure.test', ...auth, '--', 'sh', '-c', 'echo "$ETCD_LOCK_REV"'], env);
      assert.equal(locked.code, 0, locked.stderr);
      assert.match(locked.stdout, /^\d+\n$/);
    });
  });
});

/** A DNS name at `offset` (no compression in questions), and the offset after it. */
function readName(msg: Buffer, offset: number): { name: string; end: number } {
  const labels: string[] = [];
  let i = offset;
  while (msg[i] !== 0) {
    const len = msg[i]!;
    labels.push(msg.toString('latin1', i + 1, i + 1 + len));
    i += 1 + len;
  }
  return { name: labels.join('.'), end: i + 1 };
}

function encodeName(name: string): Buffer {
  return Buffer.concat([
    ...name.split('.').map((l) => Buffer.concat([Buffer.from([l.length]), Buffer.from(l, 'latin1')])),
    Buffer.from([0]),
  ]);
}

/** The answer to `query` (its question ends at `questionEnd`): SRV records, or NXDOMAIN when there are none. */
function dnsAnswer(query: Buffer, questionEnd: number, answers: [string, number][]): Buffer {
  const header = Buffer.alloc(12);
  query.copy(header, 0, 0, 2); // id
  header.writeUInt16BE(answers.length > 0 ? 0x8180 : 0x8183, 2); // response, recursion available; NXDOMAIN
  header.writeUInt16BE(1, 4);
  header.writeUInt16BE(answers.length, 6);
  const records = answers.map(([target, port]) => {
    const rdata = Buffer.concat([Buffer.from([0, 10, 0, 10, port >> 8, port & 0xff]), encodeName(target)]);
    const fixed = Buffer.alloc(12);
    fixed.writeUInt16BE(0xc00c, 0); // the question's name
    fixed.writeUInt16BE(33, 2); // SRV
    fixed.writeUInt16BE(1, 4); // IN
    fixed.writeUInt32BE(60, 6);
    fixed.writeUInt16BE(rdata.length, 10);
    return Buffer.concat([fixed, rdata]);
  });
  return Buffer.concat([header, query.subarray(12, questionEnd), ...records]);
}
