// Getting an etcd without the repository: the installer
// ships as `etcd-concurrency etcd`, reads the Debian archive from the machine's apt sources (no
// mirror host is written in the package), says what else to do when it cannot install, and `dev`
// runs on 2379 when it is free. The packed package's own run is in test/package.test.ts.
// Runs the built CLI (dist/cli/main.js): `npm run build` first.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { chmod, mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { createServer as createHttpServer } from 'node:http';
import { createServer, type AddressInfo, type Server } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { cachedEtcds } from '../src/launcher/binary.js';
import { debianMirror } from '../src/launcher/sources.js';
import { goFor, moduleDir } from '../src/launcher/install.js';
import { assertOneErrorLine, CLI_MAIN, killClis, runCli, runCliToEnd } from './helpers.js';

let work: string;
before(async () => {
  assert.ok(existsSync(CLI_MAIN), `${CLI_MAIN} is missing: run \`npm run build\` first`);
  work = await mkdtemp(path.join(tmpdir(), 'etcd-installer-'));
});
after(async () => {
  await killClis();
  await rm(work, { recursive: true, force: true });
});

/** An /etc/apt of our own with these files. */
async function aptDir(name: string, files: Record<string, string>): Promise<string> {
  const dir = path.join(work, name);
  await mkdir(path.join(dir, 'sources.list.d'), { recursive: true });
  for (const [f, text] of Object.entries(files)) await writeFile(path.join(dir, f), text);
  return dir;
}

describe("the Debian archive comes from the machine's apt sources", () => {
  const saved = process.env.ETCD_DEBIAN_MIRROR;
  before(() => delete process.env.ETCD_DEBIAN_MIRROR);
  after(() => (saved === undefined ? delete process.env.ETCD_DEBIAN_MIRROR : (process.env.ETCD_DEBIAN_MIRROR = saved)));

  test('deb822 (*.sources): the Debian suite with main, not the security archive', async () => {
    const etc = await aptDir('deb822', {
      'sources.list.d/debian.sources':
        'Types: deb\n# a comment\nURIs: http://security.mirror.test/debian-security\nSuites: bookworm-security\nComponents: main\n\n' +
        'Types: deb\nURIs: http://archive.mirror.test/debian/\nSuites: bookworm bookworm-updates\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n',
    });
    assert.equal(debianMirror(etc), 'http://archive.mirror.test/debian');
  });

  test('one-line format (sources.list, *.list), options in brackets; disabled and other-distribution sources are skipped', async () => {
    const etc = await aptDir('one-line', {
      'sources.list': '# deb http://old.test/debian bookworm main\ndeb [arch=amd64] http://ubuntu.test/ubuntu noble main\n',
      'sources.list.d/a.list': 'deb [signed-by=/k.gpg] https://deb.mirror.test/debian trixie main contrib\n',
      'sources.list.d/b.sources': 'Types: deb\nEnabled: no\nURIs: http://off.test/debian\nSuites: sid\nComponents: main\n',
    });
    assert.equal(debianMirror(etc), 'https://deb.mirror.test/debian');
  });

  test('no Debian source (an Ubuntu machine): none, unless ETCD_DEBIAN_MIRROR names one', async () => {
    const etc = await aptDir('ubuntu', { 'sources.list': 'deb http://ubuntu.test/ubuntu noble main universe\n' });
    assert.equal(debianMirror(etc), undefined);
    process.env.ETCD_DEBIAN_MIRROR = 'http://mine.test/debian/';
    try {
      assert.equal(debianMirror(etc), 'http://mine.test/debian');
    } finally {
      delete process.env.ETCD_DEBIAN_MIRROR;
    }
  });
});

describe('`etcd-concurrency etcd`', () => {
  test('list names the command a package user runs, with a cache of its own', async () => {
    const r = await runCliToEnd(['etcd', 'list'], { ETCD_CACHE_DIR: path.join(work, 'empty-cache') });
    assert.equal(r.code, 0, r.stderr);
    for (const line of ['3.4', '3.5', '3.6', '3.7'])
      assert.match(
        r.stdout,
        new RegExp(`^${line.replace('.', '\\.')} +not installed: etcd-concurrency etcd install ${line.replace('.', '\\.')} `, 'm'),
      );
  });

  test('bad requests exit 2 (usage) with one line saying what is supported; without a command, the help on stderr', async () => {
    const bad = await runCliToEnd(['etcd', 'install', '9.9'], { ETCD_CACHE_DIR: path.join(work, 'empty-cache') });
    assert.equal(bad.code, 2);
    assertOneErrorLine(bad.stderr, /unknown etcd version "9\.9"; supported: 3\.4, 3\.5, 3\.6, 3\.7/);
    const notPinned = await runCliToEnd(['etcd', 'install', '3.7.0'], { ETCD_CACHE_DIR: path.join(work, 'empty-cache') });
    assert.equal(notPinned.code, 2);
    assertOneErrorLine(notPinned.stderr, /etcd 3\.7\.0 is not pinned here: 3\.7 means 3\.7\.3; .*etcd-concurrency etcd add <dir>/);
    const none = await runCliToEnd(['etcd']);
    assert.equal(none.code, 2);
    assert.equal(none.stdout, '');
    assert.match(none.stderr, /install <3\.4\|3\.5\|3\.6\|3\.7\|all>/);
  });

  test('a line that cannot be built names the other ways to get etcd', () => {
    const r = goFor(path.join(work, 'no-such-module'));
    assert.ok(r.error, 'no module, no Go build');
  });

  test('the library, with no etcd anywhere, points a package user at the installer, not at the repository alone', async () => {
    const r = await runCliToEnd(['dev', '--etcd', '3.6.99'], { ETCD_CACHE_DIR: path.join(work, 'empty-cache') });
    assert.equal(r.code, 1, r.stderr);
    assert.match(r.stderr, /npx etcd-concurrency etcd install 3\.6/);
    assert.match(r.stderr, /apt-get install etcd-server etcd-client/);
    assert.match(r.stderr, /brew install etcd/);
    assert.match(r.stderr, /dev --etcd-binary/);
  });
});

describe('dev listens on 2379 when it is free', () => {
  function listen(port: number): Promise<Server | undefined> {
    return new Promise((resolve) => {
      const s = createServer();
      s.once('error', () => resolve(undefined));
      s.listen(port, '127.0.0.1', () => resolve(s));
    });
  }

  test('2379 taken: dev says so and runs on free ports', async () => {
    // Hold 2379 ourselves (or it is already someone else's: the same case).
    const held = await listen(2379);
    try {
      const dev = runCli(['dev']);
      const line = await dev.next(/^export ETCDCTL_ENDPOINTS=/);
      assert.doesNotMatch(line, /:2379\b/);
      assert.match(dev.stderr(), /ports 2379-2380 are not all free on 127\.0\.0\.1; using free ports instead/);
      assert.equal(await dev.kill('SIGINT'), 0);
    } finally {
      held?.close();
    }
  });

  test('2379 and 2380 free: dev uses them, where the Client and etcdctl look by default', async (t) => {
    const a = await listen(2379);
    const b = await listen(2380);
    a?.close();
    b?.close();
    if (!a || !b) return t.skip('2379 or 2380 is in use on this machine');
    const dev = runCli(['dev']);
    const line = await dev.next(/^export ETCDCTL_ENDPOINTS=/);
    assert.equal(line, 'export ETCDCTL_ENDPOINTS=127.0.0.1:2379');
    assert.equal(await dev.kill('SIGINT'), 0);
  });
});

// ── the installer's supply chain ───────────────────────────────────────────────────────────────

/** Whether Debian's package tools are here (the installer's .deb path needs them). */
const debTools = ['apt-get', 'apt-cache', 'dpkg-deb'].every((t) => spawnSync('sh', ['-c', `command -v ${t}`]).status === 0);

/** The uid of `user`, or undefined when there is none. */
function uidOf(user: string): number | undefined {
  const r = spawnSync('id', ['-u', user], { encoding: 'utf8' });
  return r.status === 0 ? Number(r.stdout.trim()) : undefined;
}

/**
 * The uid owning the client end of the TCP connection from `port` to our `serverPort` on this
 * machine, from the kernel's socket table: who really made the request (apt's download worker, or
 * apt as root). Only an established socket with both ports counts: the table also lists closed
 * connections in TIME_WAIT, under uid 0, and one of them may have used the same client port to
 * reach another server.
 */
function uidOfPeer(port: number, serverPort: number): number | undefined {
  const hex = (n: number) => `:${n.toString(16).toUpperCase().padStart(4, '0')}`;
  for (const table of ['/proc/net/tcp', '/proc/net/tcp6']) {
    if (!existsSync(table)) continue;
    for (const line of readFileSync(table, 'utf8').split('\n').slice(1)) {
      const f = line.trim().split(/\s+/);
      const established = f[3] === '01';
      if (established && f[1]?.endsWith(hex(port)) && f[2]?.endsWith(hex(serverPort))) return Number(f[7]);
    }
  }
  return undefined;
}

/**
 * An unsigned Debian repository (suite sid) whose etcd-server 3.5.30 is a planted script: when run
 * (the installer runs `etcd --version` to check it), it creates `marker`, then reports 3.5.30 as
 * the real one would. Served over HTTP on loopback; each request's path and the uid that made it
 * are recorded.
 */
async function plantedMirror(dir: string, marker: string) {
  const arch = spawnSync('dpkg', ['--print-architecture'], { encoding: 'utf8' }).stdout.trim();
  const pool = path.join(dir, 'debian', 'pool');
  await mkdir(pool, { recursive: true });
  let packages = '';
  for (const [pkg, bin] of [
    ['etcd-server', 'etcd'],
    ['etcd-client', 'etcdctl'],
  ] as const) {
    const root = path.join(dir, 'build', pkg);
    await mkdir(path.join(root, 'DEBIAN'), { recursive: true });
    await mkdir(path.join(root, 'usr', 'bin'), { recursive: true });
    await writeFile(
      path.join(root, 'DEBIAN', 'control'),
      `Package: ${pkg}\nVersion: 3.5.30-1\nArchitecture: ${arch}\nMaintainer: test <test@invalid>\nDescription: planted\n`,
    );
    const script = `#!/bin/sh\ntouch '${marker}'\necho 'etcd Version: 3.5.30'\necho 'etcdctl version: 3.5.30'\n`;
    await writeFile(path.join(root, 'usr', 'bin', bin), script, { mode: 0o755 });
    const file = `${pkg}_3.5.30-1_${arch}.deb`;
    const built = spawnSync('dpkg-deb', ['--root-owner-group', '-b', root, path.join(pool, file)], { encoding: 'utf8' });
    assert.equal(built.status, 0, built.stderr);
    const deb = await readFile(path.join(pool, file));
    packages +=
      `Package: ${pkg}\nVersion: 3.5.30-1\nArchitecture: ${arch}\nMaintainer: test <test@invalid>\nFilename: pool/${file}\n` +
      `Size: ${deb.length}\nSHA256: ${createHash('sha256').update(deb).digest('hex')}\nDescription: planted\n\n`;
  }
  const lists = path.join(dir, 'debian', 'dists', 'sid', 'main', `binary-${arch}`);
  await mkdir(lists, { recursive: true });
  await writeFile(path.join(lists, 'Packages'), packages);
  const sha = createHash('sha256').update(packages).digest('hex');
  await writeFile(
    path.join(dir, 'debian', 'dists', 'sid', 'Release'),
    `Origin: test\nSuite: sid\nCodename: sid\nDate: ${new Date().toUTCString()}\nArchitectures: ${arch}\nComponents: main\n` +
      `SHA256:\n ${sha} ${Buffer.byteLength(packages)} main/binary-${arch}/Packages\n`,
  );
  const requests: { path: string; uid: number | undefined }[] = [];
  const server = createHttpServer((req, res) => {
    requests.push({ path: req.url ?? '', uid: uidOfPeer(req.socket.remotePort!, req.socket.localPort!) });
    const file = path.join(dir, path.normalize(decodeURIComponent(req.url ?? '/')));
    readFile(file).then(
      (body) => res.writeHead(200).end(body),
      () => res.writeHead(404).end(),
    );
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/debian`,
    requests,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

describe("the installer's supply chain", () => {
  test('ETCD_DEBIAN_MIRROR must be one http(s) URL: a second apt source, options or another scheme are refused before apt runs', {
    skip: !debTools && 'needs apt-get, apt-cache and dpkg-deb',
  }, async () => {
    const dir = await mkdtemp(path.join(work, 'mirror-'));
    const mirror = await plantedMirror(dir, path.join(dir, 'ran'));
    try {
      for (const bad of [
        `${mirror.url} sid main\ndeb [trusted=yes] ${mirror.url}`,
        `${mirror.url}\r\ndeb [trusted=yes] ${mirror.url}`,
        `${mirror.url} sid`,
        `[trusted=yes] ${mirror.url}`,
        'ftp://deb.example/debian',
        `${mirror.url}#x`,
      ]) {
        const r = await runCliToEnd(['etcd', 'install', '3.5.30'], { ETCD_DEBIAN_MIRROR: bad, ETCD_CACHE_DIR: path.join(dir, 'cache') });
        assert.equal(r.code, 1, `${JSON.stringify(bad)}: ${r.stderr}`);
        assertOneErrorLine(
          r.stderr,
          /ETCD_DEBIAN_MIRROR must be one http:\/\/ or https:\/\/ URL \(the Debian archive, e.g\. ending in \/debian\), got /,
        );
        assert.deepEqual(mirror.requests, [], `apt ran for ${JSON.stringify(bad)}`);
      }
    } finally {
      await mirror.close();
    }
  });

  test("an unsigned repository is refused even where the machine's apt configuration allows one; as root, apt's downloads run as _apt", {
    skip: !debTools && 'needs apt-get, apt-cache and dpkg-deb',
  }, async () => {
    const dir = await mkdtemp(path.join(work, 'unsigned-'));
    const marker = path.join(dir, 'planted-etcd-ran');
    const mirror = await plantedMirror(dir, marker);
    // A machine whose apt is told to accept unsigned repositories and unauthenticated packages.
    const conf = path.join(dir, 'apt.conf');
    await writeFile(
      conf,
      'Acquire::AllowInsecureRepositories "true";\nAcquire::AllowDowngradeToInsecureRepositories "true";\nAPT::Get::AllowUnauthenticated "true";\n',
    );
    try {
      const r = await runCliToEnd(['etcd', 'install', '3.5.30'], {
        ETCD_DEBIAN_MIRROR: mirror.url,
        ETCD_CACHE_DIR: path.join(dir, 'cache'),
        APT_CONFIG: conf,
      });
      assert.equal(existsSync(marker), false, `the planted etcd ran: ${r.stdout}${r.stderr}`);
      assert.equal(r.code, 1, r.stderr);
      assert.match(r.stderr, /is not signed/);
      assert.ok(
        mirror.requests.some((q) => q.path.endsWith('/dists/sid/Release')),
        `apt asked the mirror: ${JSON.stringify(mirror.requests)}`,
      );
      const apt = uidOf('_apt');
      if (process.getuid?.() === 0 && apt !== undefined) {
        assert.deepEqual(
          [...new Set(mirror.requests.map((q) => q.uid))],
          [apt],
          `every download by apt's worker as _apt (uid ${apt}), not as root: ${JSON.stringify(mirror.requests)}`,
        );
      }
    } finally {
      await mirror.close();
    }
  });

  test('a cache directory that someone else owns or may write is refused: an etcd planted there never runs', async (t) => {
    const dir = await mkdtemp(path.join(work, 'planted-cache-'));
    const marker = path.join(dir, 'planted-etcd-ran');
    /** A cache holding an "etcd 3.7.99" that records being run. */
    const plant = async (name: string): Promise<{ cache: string; version: string }> => {
      const cache = path.join(dir, name);
      const version = path.join(cache, '3.7.99');
      await mkdir(version, { recursive: true });
      for (const bin of ['etcd', 'etcdctl']) {
        await writeFile(path.join(version, bin), `#!/bin/sh\ntouch '${marker}'\necho 'etcd Version: 3.7.99'\n`, { mode: 0o755 });
      }
      return { cache, version };
    };
    const cases: { what: string; cache: string; re: RegExp }[] = [];
    const open = await plant('world-writable');
    await chmod(open.cache, 0o777);
    cases.push({ what: 'a cache anyone may write', cache: open.cache, re: /world-writable is writable by others: .*chmod go-w/ });
    const group = await plant('group-writable-version');
    await chmod(group.version, 0o775);
    cases.push({ what: 'a version directory its group may write', cache: group.cache, re: /3\.7\.99 is writable by its group: / });
    const nobody = uidOf('nobody');
    if (process.getuid?.() === 0 && nobody !== undefined) {
      const theirs = await plant('theirs');
      spawnSync('chown', ['-R', `${nobody}`, theirs.cache]);
      cases.push({
        what: "another user's cache, for root",
        cache: theirs.cache,
        re: new RegExp(`theirs belongs to uid ${nobody}, not to you \\(uid 0\\)`),
      });
    } else t.diagnostic('not root: the case of a cache owned by another user is not run');
    for (const c of cases) {
      for (const args of [
        ['dev', '--etcd', '3.7.99'],
        ['etcd', 'list'],
        ['etcd', 'path', '3.7'],
      ]) {
        const r = await runCliToEnd(args, { ETCD_CACHE_DIR: c.cache });
        assert.equal(existsSync(marker), false, `${c.what}: ${args.join(' ')} ran the planted etcd`);
        assert.equal(r.code, 1, `${c.what}: ${args.join(' ')}: ${r.stderr}`);
        assertOneErrorLine(r.stderr, c.re);
        assert.match(r.stderr, /ETCD_CACHE_DIR/);
      }
    }
    // Made safe, the same cache is used.
    await chmod(open.cache, 0o755);
    const ok = await runCliToEnd(['etcd', 'path', '3.7.99'], { ETCD_CACHE_DIR: open.cache });
    assert.equal(ok.code, 0, ok.stderr);
    assert.equal(ok.stdout.trim(), open.version);
  });

  test('what the installer writes under a umask of 002 (group-writable by default) is still safe to run from', async (t) => {
    const [some] = await cachedEtcds();
    if (!some) return t.skip('no etcd in the cache to add');
    const cache = path.join(await mkdtemp(path.join(work, 'umask-')), 'new', 'cache');
    const add = spawnSync('sh', ['-c', 'umask 002 && exec "$0" "$@"', process.execPath, CLI_MAIN, 'etcd', 'add', path.dirname(some.etcd)], {
      env: { ...process.env, ETCD_CACHE_DIR: cache },
      encoding: 'utf8',
    });
    assert.equal(add.status, 0, add.stderr);
    const used = await runCliToEnd(['etcd', 'path', some.version], { ETCD_CACHE_DIR: cache });
    assert.equal(used.code, 0, used.stderr);
    assert.equal(used.stdout.trim(), path.join(cache, some.version));
  });

  test('the Go build ignores a go.work (GOWORK) that would swap the modules etcd is built from', {
    timeout: 600_000,
    skip: goFor(moduleDir('3.7')).error,
  }, async () => {
    const dir = await mkdtemp(path.join(work, 'gowork-'));
    // A workspace that does not hold our module: go refuses to build it, unless told GOWORK=off.
    await mkdir(path.join(dir, 'other'));
    await writeFile(path.join(dir, 'other', 'go.mod'), 'module example.com/other\n\ngo 1.22\n');
    await writeFile(path.join(dir, 'go.work'), 'go 1.22\n\nuse ./other\n');
    const r = await runCliToEnd(['etcd', 'install', '3.7'], { GOWORK: path.join(dir, 'go.work'), ETCD_CACHE_DIR: path.join(dir, 'cache') });
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.stdout.trim(), path.join(dir, 'cache', '3.7.3'));
  });
});
