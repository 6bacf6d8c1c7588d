// The command line at par with etcdctl, `consul lock` and flock(1). Every case drives the
// built CLI (dist/cli/main.js) as a child process against a real etcd: try-once and conflict codes,
// holder labels (also with etcdctl on the same lock), the whole process group on loss, shell mode,
// --verbose, and every etcdctl connection flag with its ETCDCTL_* variable against a TLS cluster
// with authentication. --discovery-srv is resolved by a small DNS server this file starts on
// loopback (node:dgram); the CLI is pointed at it with a preloaded module that calls
// dns.setServers (NODE_OPTIONS=--import), so the CLI itself has no test-only hook.
// Run `npm run build` first. Every wait is on an output line, an exit, or etcd state.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { createSocket, type Socket } from 'node:dgram';
import { readFileSync } from 'node:fs';
import { mkdtemp, rm, symlink, writeFile } from 'node:fs/promises';
import { hostname, tmpdir } from 'node:os';
import path from 'node:path';
import { setTimeout as delay } from 'node:timers/promises';
import { Client } from '../src/index.js';
import { startEtcd, type EtcdCluster } from '../src/testing/index.js';
import { assertNoKeys, hasEtcdctl, hasOpenssl, assertOneErrorLine, etcdForCliFile, runCli as start, runCliToEnd as run, spawnEtcdctl, testCerts, waitFor, type CliProc } from './helpers.js';

const ROOT = 'test/cli-parity/';

let client: Client;
let endpoint: string;

const prefix = etcdForCliFile(ROOT, (e, c) => ((client = c), (endpoint = e.endpoints[0]!)));

const fresh = (scope: string): string => `${prefix(scope)}n`;

/** The participant keys of `name` with their values, oldest first. */
async function keysOf(name: string): Promise<{ key: string; value: string }[]> {
  const r = await client.getPrefix(`${name}/`);
  return r.kvs.sort((a, b) => (a.createRevision < b.createRevision ? -1 : 1)).map((kv) => ({ key: kv.key.toString(), value: kv.value.toString() }));
}

const esc = (s: string): string => s.replace(/[.*+?^${}()|[\]\\/]/g, '\\$&');

/** A holder without a command: resolves with its key once it holds. */
async function holder(name: string, extra: string[] = []): Promise<{ p: CliProc; key: string }> {
  const p = start(['lock', name, '--endpoints', endpoint, ...extra]);
  const key = /^key=(\S+)/.exec(await p.next(/^key=/))![1]!;
  return { p, key };
}

async function release(h: { p: CliProc }): Promise<void> {
  h.p.child.kill('SIGINT');
  assert.equal(await h.p.exited, 0, h.p.stderr());
}

/** Whether process `pid` still runs (a zombie, dead but not yet reaped by its new parent, counts as gone). */
function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch {
    return false;
  }
  try {
    return !/^\d+ \(.*\) Z/s.test(readFileSync(`/proc/${pid}/stat`, 'utf8'));
  } catch {
    return true;
  }
}

describe('try once, and the exit code on conflict', () => {
  test('--try and --timeout 0 give up at once on a held lock, name the holder and its label, and leave no key', async () => {
    const name = fresh('try');
    const h = await holder(name, ['--label', 'batch-host:42']);
    for (const flags of [['--try'], ['--timeout', '0']]) {
      const r = await run(['lock', name, '--endpoints', endpoint, ...flags, '--', 'echo', 'ran']);
      assert.equal(r.code, 4, `${flags.join(' ')}: ${r.stderr}`);
      assert.equal(r.stdout, '', 'the command must not run');
      assertOneErrorLine(r.stderr, new RegExp(`lock ${esc(name)} is taken \\(held by ${esc(h.key)} batch-host:42, token \\d+\\); not waiting`));
      assert.deepEqual((await keysOf(name)).map((k) => k.key), [h.key], 'the try left its key behind');
    }
    await release(h);
    // Free: it runs the command at once.
    const r = await run(['lock', name, '--endpoints', endpoint, '--try', '--', 'echo', 'ran']);
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.stdout, 'ran\n');
    await assertNoKeys(client, `${name}/`);
  });

  test('--conflict-exit-code sets the status for --try and for an expired --timeout (flock -E), including 0', async () => {
    const name = fresh('conflict-code');
    const h = await holder(name);
    const tried = await run(['lock', name, '--endpoints', endpoint, '--try', '--conflict-exit-code', '75', '--', 'true']);
    assert.equal(tried.code, 75, tried.stderr);
    assertOneErrorLine(tried.stderr, /is taken \(held by/);
    const timed = await run(['lock', name, '--endpoints', endpoint, '--timeout', '200ms', '--conflict-exit-code', '0', '--', 'echo', 'ran']);
    assert.equal(timed.code, 0, timed.stderr);
    assert.equal(timed.stdout, '');
    assertOneErrorLine(timed.stderr, new RegExp(`timed out after 200ms waiting for lock ${esc(name)} \\(held by ${esc(h.key)}`));
    assert.deepEqual((await keysOf(name)).map((k) => k.key), [h.key]);
    await release(h);
    await assertNoKeys(client, `${name}/`);
  });

  test('--try on a semaphore with no free permit and on a write lock with a reader', async () => {
    const sem = fresh('try-sem');
    const s = await holder(sem, ['--limit', '1']);
    const r1 = await run(['lock', sem, '--endpoints', endpoint, '--limit', '1', '--try', '--', 'true']);
    assert.equal(r1.code, 4, r1.stderr);
    assertOneErrorLine(r1.stderr, new RegExp(`a permit of semaphore ${esc(sem)} is taken \\(held by ${esc(s.key)}`));
    const rw = fresh('try-rw');
    const reader = await holder(rw, ['--read']);
    const r2 = await run(['lock', rw, '--endpoints', endpoint, '--write', '--try', '--', 'true']);
    assert.equal(r2.code, 4, r2.stderr);
    assertOneErrorLine(r2.stderr, /the write lock of .* is taken/);
    // Readers share: a second reader's --try succeeds.
    const r3 = await run(['lock', rw, '--endpoints', endpoint, '--read', '--try', '--', 'true']);
    assert.equal(r3.code, 0, r3.stderr);
    assert.deepEqual((await keysOf(rw)).map((k) => k.key), [reader.key]);
    await release(s);
    await release(reader);
    await assertNoKeys(client, `${sem}/`);
    await assertNoKeys(client, `${rw}/`);
  });

  test('bad or pointless --conflict-exit-code is refused with exit 2', async () => {
    const cases: [string[], RegExp][] = [
      [['--try', '--conflict-exit-code', '256'], /--conflict-exit-code must be a whole number from 0 to 255, got "256"/],
      [['--try', '--conflict-exit-code', 'x'], /--conflict-exit-code must be a whole number/],
      [['--conflict-exit-code', '3'], /--conflict-exit-code only applies with --try or --timeout/],
      [['-c', 'true', 'echo'], /either with -c or after the lock name/],
      [['--shell'], /--shell needs a command/],
    ];
    for (const [flags, re] of cases) {
      const r = await run(['lock', 'x', '--endpoints', endpoint, ...flags]);
      assert.equal(r.code, 2, `${flags.join(' ')}: ${r.stderr}`);
      assertOneErrorLine(r.stderr, re);
    }
  });
});

describe('holder labels', () => {
  test('the default label is <hostname>:<pid>, --label sets it, and inspect shows it (plain and --json)', async () => {
    const name = fresh('label');
    const a = await holder(name);
    const b = start(['lock', name, '--endpoints', endpoint, '--label', 'deploy by ann', '--', 'true']);
    await waitFor(async () => (await keysOf(name)).length === 2, 'the second to queue');
    assert.deepEqual((await keysOf(name)).map((k) => k.value), [`${hostname()}:${a.p.child.pid}`, 'deploy by ann']);
    const plain = await run(['inspect', name, '--endpoints', endpoint]);
    assert.match(plain.stdout, /\bVALUE\b/);
    assert.match(plain.stdout, new RegExp(`^owner .*${esc(`${hostname()}:${a.p.child.pid}`)}$`, 'm'));
    assert.match(plain.stdout, /^#1 .*"deploy by ann"$/m);
    const j = JSON.parse((await run(['inspect', name, '--endpoints', endpoint, '--json'])).stdout) as { owner: { label: string }; waiting: { label: string }[] };
    assert.equal(j.owner.label, `${hostname()}:${a.p.child.pid}`);
    assert.equal(j.waiting[0]!.label, 'deploy by ann');
    await release(a);
    assert.equal(await b.exited, 0, b.stderr());
    // --label '' writes no value, as etcdctl and Go's Mutex.
    const none = await holder(name, ['--label', '']);
    assert.deepEqual(await keysOf(name), [{ key: none.key, value: '' }]);
    await release(none);
    await assertNoKeys(client, `${name}/`);
  });

  test('a semaphore keeps its permit count first ("<n> <label>"): inspect shows the label, a different count is still refused', async () => {
    const name = fresh('label-sem');
    const a = await holder(name, ['--limit', '2', '--label', 'worker-a']);
    const b = await holder(name, ['--limit', '2']);
    assert.deepEqual((await keysOf(name)).map((k) => k.value), ['2 worker-a', `2 ${hostname()}:${b.p.child.pid}`]);
    const j = JSON.parse((await run(['inspect', name, '--endpoints', endpoint, '--json'])).stdout) as { kind: string; permits: number; holders: { label: string }[] };
    assert.equal(j.kind, 'semaphore');
    assert.equal(j.permits, 2);
    assert.deepEqual(j.holders.map((p) => p.label), ['worker-a', `${hostname()}:${b.p.child.pid}`]);
    const plain = await run(['inspect', name, '--endpoints', endpoint]);
    assert.match(plain.stdout, /semaphore, 2 of 2 permits held/);
    assert.match(plain.stdout, /^permit .* worker-a$/m);
    const other = await run(['lock', name, '--endpoints', endpoint, '--limit', '3', '--label', 'x', '--', 'true']);
    assert.equal(other.code, 1, other.stderr);
    assert.match(other.stderr, /asked for with 3 permits, but \S+ uses it with 2 permits/);
    await release(a);
    await release(b);
    await assertNoKeys(client, `${name}/`);
  });

  test('etcdctl lock and a labelled holder exclude each other both ways', { skip: !hasEtcdctl() && 'etcdctl is not installed' }, async () => {
    const name = fresh('label-etcdctl');
    const ours = await holder(name, ['--label', 'ours']);
    const ctl = spawnEtcdctl(endpoint, ['lock', name]);
    await waitFor(async () => (await keysOf(name)).length === 2, 'etcdctl to queue');
    assert.deepEqual((await keysOf(name)).map((k) => k.value), ['ours', ''], 'etcdctl writes an empty value, ours a label');
    assert.equal(ctl.stdout(), '', 'etcdctl must not get the lock while we hold it');
    await release(ours);
    const ctlKey = await ctl.line(new RegExp(`^${esc(name)}/`));
    const waiter = start(['lock', name, '--endpoints', endpoint, '--label', 'second', '--', 'sh', '-c', 'echo "ran $ETCD_LOCK_KEY"']);
    await waitFor(async () => (await keysOf(name)).length === 2, 'ours to queue');
    assert.deepEqual(await keysOf(name), [{ key: ctlKey, value: '' }, { key: (await keysOf(name))[1]!.key, value: 'second' }]);
    assert.equal(waiter.stdout(), '', 'ours must not run while etcdctl holds');
    await ctl.kill();
    await waiter.next(/^ran /);
    assert.equal(await waiter.exited, 0, waiter.stderr());
    await assertNoKeys(client, `${name}/`);
    // etcdctl leaves its lease to expire: revoke it (ours were revoked by the CLI).
    await Promise.all((await client.leaseLeases()).map((l) => client.leaseRevoke(l)));
  });
});

describe('the process group', () => {
  /** A shell script that starts a grandchild, prints its pid, and waits. */
  const script = (grandchild: string): string => `${grandchild} & echo "grandchild $!"; wait`;

  test('lock lost: SIGTERM reaches the script and its own child (the whole group), exit 3', async () => {
    const name = fresh('group-lost');
    const p = start(['lock', name, '--endpoints', endpoint, '-c', script('sleep 1000')]);
    const pid = Number(/(\d+)$/.exec(await p.next(/^grandchild \d+$/))![1]);
    assert.ok(alive(pid));
    const [k] = await keysOf(name);
    await client.delete(k!.key);
    assert.equal(await p.exited, 3);
    assertOneErrorLine(p.stderr(), /lock lost while the command ran: .*sent SIGTERM to the command's process group/);
    // A hang guard, not a timing: without the group signal the grandchild lives for 1000 s.
    await waitFor(() => !alive(pid), `grandchild ${pid} to die`, { limitMs: 10_000 });
    await assertNoKeys(client, `${name}/`);
  });

  test('lock lost: a grandchild that ignores SIGTERM is SIGKILLed after --kill-grace, before we exit', async () => {
    const name = fresh('group-kill');
    const p = start(['lock', name, '--endpoints', endpoint, '--kill-grace', '1s', '-c', script(`sh -c 'trap "" TERM; echo armed; while :; do sleep 1; done'`)]);
    // Two shells print these, in either order: take both lines as they come.
    const lines = [await p.next(/^(grandchild \d+|armed)$/), await p.next(/^(grandchild \d+|armed)$/)];
    const pid = Number(/^grandchild (\d+)$/.exec(lines.find((l) => l !== 'armed') ?? '')![1]);
    assert.ok(lines.includes('armed'), lines.join(' | '));
    const [k] = await keysOf(name);
    await client.delete(k!.key);
    assert.equal(await p.exited, 3);
    assertOneErrorLine(p.stderr(), /SIGKILL follows in 1s/);
    await waitFor(() => !alive(pid), `grandchild ${pid} to die`, { limitMs: 10_000 });
    await assertNoKeys(client, `${name}/`);
  });

  test('SIGTERM to the CLI is forwarded to the whole group; the lock is released after', async () => {
    const name = fresh('group-forward');
    const p = start(['lock', name, '--endpoints', endpoint, '-c', script('sleep 1000')]);
    const pid = Number(/(\d+)$/.exec(await p.next(/^grandchild \d+$/))![1]);
    p.child.kill('SIGTERM');
    assert.equal(await p.exited, 143);
    await waitFor(() => !alive(pid), `grandchild ${pid} to die`, { limitMs: 10_000 });
    await assertNoKeys(client, `${name}/`);
  });
});

describe('shell mode and --verbose', () => {
  test('-c and --shell run through $SHELL -c (default /bin/sh), with the lock environment', async () => {
    const dir = await mkdtemp(path.join(tmpdir(), 'cli-shell-'));
    try {
      const shell = path.join(dir, 'my-shell');
      await symlink('/bin/sh', shell);
      const name = fresh('shell');
      const c = await run(['lock', name, '--endpoints', endpoint, '-c', 'echo "$0 $ETCD_LOCK_KEY $ETCD_LOCK_REV" | tr a-z A-Z'], { SHELL: shell });
      assert.equal(c.code, 0, c.stderr);
      assert.match(c.stdout, new RegExp(`^${esc(shell.toUpperCase())} ${esc(name.toUpperCase())}/[0-9A-F]+ \\d+\\n$`));
      const s = await run(['lock', name, '--endpoints', endpoint, '--shell', '--', 'echo', '$0', '&&', 'exit', '7'], { SHELL: '' });
      assert.equal(s.code, 7, s.stderr);
      assert.equal(s.stdout, '/bin/sh\n');
      await assertNoKeys(client, `${name}/`);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  test('--verbose tells when it queued, whom it waits behind, when it acquired (token, time) and released', async () => {
    const name = fresh('verbose');
    const h = await holder(name, ['--label', 'first']);
    const p = start(['lock', name, '--endpoints', endpoint, '--verbose', '--label', 'second', '--', 'echo', 'working']);
    assert.match(await p.next(/^etcd-concurrency: connected /, 'stderr'), /connected to .* session lease [0-9a-f]+, TTL 30s$/);
    const queued = await p.next(/^etcd-concurrency: queued /, 'stderr');
    const m = new RegExp(`^etcd-concurrency: queued as (${esc(name)}/[0-9a-f]+) with token (\\d+) behind ${esc(h.key)} \\(first\\), the holder$`).exec(queued);
    assert.ok(m, queued);
    assert.equal(p.stdout(), '');
    await release(h);
    const acquired = await p.next(/^etcd-concurrency: acquired /, 'stderr');
    assert.match(acquired, new RegExp(`^etcd-concurrency: acquired ${esc(m[1]!)} with token ${m[2]} after \\d+\\.\\d{3}s$`));
    await p.next(/^working$/);
    assert.equal(await p.next(/^etcd-concurrency: released /, 'stderr'), `etcd-concurrency: released ${m[1]}`);
    assert.equal(await p.exited, 0);
    // Free lock: nobody ahead.
    const free = await run(['lock', name, '--endpoints', endpoint, '--verbose', '--', 'true']);
    assert.match(free.stderr, /queued as \S+ with token \d+: nobody ahead\n.*acquired /);
    await assertNoKeys(client, `${name}/`);
  });
});

describe('etcdctl connection flags and ETCDCTL_* variables', () => {
  test('a flag and its variable together are refused (etcdctl\'s rule); unknown and unsupported variables warn', async () => {
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
    const keep = await run(['inspect', `${ROOT}nothing`, '--keepalive-time', '20s'], { ETCDCTL_ENDPOINTS: endpoint, ETCDCTL_KEEPALIVE_TIMEOUT: '5s' });
    assert.equal(keep.code, 0, keep.stderr);
    assert.equal(keep.stderr, '', 'both applied, nothing to warn about');
    const zero = await run(['inspect', `${ROOT}nothing`, '--keepalive-time', '0s'], { ETCDCTL_ENDPOINTS: endpoint });
    assert.equal(zero.code, 2, zero.stderr);
    const badBool = await run(['inspect', 'x', '--insecure-transport=maybe']);
    assert.equal(badBool.code, 2);
    assertOneErrorLine(badBool.stderr, /--insecure-transport must be true or false, got "maybe"/);
  });

  test('--insecure-transport=false (or ETCDCTL_INSECURE_TRANSPORT=false) speaks TLS even to host:port', async () => {
    for (const [args, env] of [[['--insecure-transport=false'], {}], [[], { ETCDCTL_INSECURE_TRANSPORT: 'false' }]] as const) {
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
      for (const [args, env] of [[['--endpoints', own.endpoints[0]!, '--command-timeout', '300ms'], {}], [[], { ETCDCTL_ENDPOINTS: own.endpoints[0]!, ETCDCTL_COMMAND_TIMEOUT: '300ms' }]] as const) {
        // --dial-timeout 60s: only the command timeout can end this before the hang guard.
        const p = start(['inspect', 'x', '--dial-timeout', '60s', ...args], { env });
        const code = await Promise.race([p.exited, delay(15_000, 'hang')]);
        assert.equal(code, 1, `still running 15 s later, or wrong exit: ${p.stderr()}`);
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
      for (const args of [['user', 'add', 'root:s3cret-pw'], ['auth', 'enable']]) {
        const r = spawnSync('etcdctl', [`--endpoints=${url}`, `--cacert=${file('ca.pem')}`, `--cert=${file('node.pem')}`, `--key=${file('node.key')}`, ...args], {
          env: { ...process.env, ETCDCTL_API: '3' },
          encoding: 'utf8',
        });
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
      const c = new Client({ endpoints: [url], tls: { ca: readFileSync(file('ca.pem')), cert: readFileSync(file('node.pem')), key: readFileSync(file('node.key')) }, auth: { username: 'root', password: 's3cret-pw' } });
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
      const viaFlags = await run(['lock', name, '--endpoints', url, ...tls(), '--user', 'root', '--password', 's3cret-pw', '--dial-timeout', '5s', '--command-timeout', '20s', '--', 'true']);
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
      const args = ['inspect', `${ROOT}skip`, '--endpoints', url, '--cert', file('node.pem'), '--key', file('node.key'), '--user', 'root:s3cret-pw'];
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
      assert.ok(queries.includes('_etcd-client-ssl._tcp.secure.test') && queries.includes('_etcd-client._tcp.secure.test'), queries.join(' '));

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
      assertOneErrorLine(missing.stderr, /--discovery-srv nowhere\.test: no etcd endpoints in DNS \(_etcd-client-ssl\._tcp\.nowhere\.test: ENOTFOUND; _etcd-client\._tcp\.nowhere\.test: ENOTFOUND\)/);

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
  return Buffer.concat([...name.split('.').map((l) => Buffer.concat([Buffer.from([l.length]), Buffer.from(l, 'latin1')])), Buffer.from([0])]);
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
