// Getting an etcd without the repository: the installer
// ships as `etcd-concurrency etcd`, reads the Debian archive from the machine's apt sources (no
// mirror host is written in the package), says what else to do when it cannot install, and `dev`
// runs on 2379 when it is free. The packed package's own run is in test/package.test.ts.
// Runs the built CLI (dist/cli/main.js): `npm run build` first.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { createServer, type Server } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { debianMirror } from '../src/launcher/sources.js';
import { goFor } from '../src/launcher/install.js';
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
