// Usage errors and messages a newcomer tripped over (issue 36): the unreachable-etcd hint said
// twice, the `etcd` subcommands' exit codes, prefix and missing "did you mean", `elect --listen`
// with a proposal, `dev --etcd` naming a version twice and an unsupported line to install, and
// passwords in endpoints echoed back. No etcd is needed: everything here fails before or at the
// dial. Runs the built CLI (dist/cli/main.js): `npm run build` first.
import { before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, rm, symlink } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { cachedEtcds } from '../src/launcher/binary.js';
import { assertOneErrorLine, CLI_MAIN, closedPort, runCliToEnd as run } from './helpers.js';

before(() => assert.ok(existsSync(CLI_MAIN), `${CLI_MAIN} is missing: run \`npm run build\` first`));

/** How often `re` (global) matches in `text`. */
const count = (text: string, re: RegExp): number => text.match(re)?.length ?? 0;

describe('etcd unreachable', () => {
  test('the hint to run `dev` or pass --endpoints comes once, for every command', async () => {
    const ep = `127.0.0.1:${await closedPort()}`;
    for (const args of [['lock', 'x'], ['inspect', 'x'], ['elect', '-l', 'x'], ['elect', 'x', 'p'], ['doctor']]) {
      const r = await run(['--endpoints', ep, ...args]);
      assert.equal(r.code, 1, `${args.join(' ')}: ${r.stderr}`);
      assertOneErrorLine(r.stderr, /connection refused/);
      assert.equal(count(r.stderr, /etcd-concurrency dev/g), 1, r.stderr);
      assert.equal(count(r.stderr, /endpoints/g), 1, `the endpoints are named once: ${r.stderr}`);
      assert.match(r.stderr, /--endpoints \(or set ETCDCTL_ENDPOINTS\)/);
    }
  });
});

describe('`etcd` subcommands', () => {
  test('usage errors exit 2 with one `etcd-concurrency:` line, as every other command', async () => {
    for (const [args, re] of [
      [['etcd', 'install', '3.8'], /unknown etcd version "3\.8"; supported: 3\.4, 3\.5, 3\.6, 3\.7 \(or "all"\)/],
      [['etcd', 'install'], /install needs a version: 3\.4, 3\.5, 3\.6, 3\.7 or all/],
      [['etcd', 'path', '3.9'], /unknown etcd version "3\.9"/],
      [['etcd', 'add'], /add needs a directory/],
      [['etcd', 'exec', '3.7'], /exec <version\|newest\|default> -- command/],
      [['etcd', 'frobnicate'], /unknown command "frobnicate"; commands: install, list, path, add, exec/],
    ] as const) {
      const r = await run([...args], { ETCD_CACHE_DIR: path.join(tmpdir(), 'no-such-etcd-cache') });
      assert.equal(r.code, 2, `${args.join(' ')}: ${r.stderr}`);
      assertOneErrorLine(r.stderr, re);
      assert.match(r.stderr, /\(see --help\)$/m);
      assert.equal(r.stdout, '');
    }
  });

  test('a mistyped subcommand or command gets "did you mean"', async () => {
    for (const [args, re] of [
      [['etcd', 'lsit'], /unknown command "lsit"; did you mean list\?/],
      [['etcd', 'instal', '3.7'], /unknown command "instal"; did you mean install\?/],
      [['etcd', 'pth'], /unknown command "pth"; did you mean path\?/],
      [['lcok', 'x'], /unknown command "lcok"; did you mean lock\?/],
      [['inpsect', 'x'], /unknown command "inpsect"; did you mean inspect\?/],
      [['help', 'elcet'], /unknown command "elcet"; did you mean elect\?/],
    ] as const) {
      const r = await run([...args]);
      assert.equal(r.code, 2, `${args.join(' ')}: ${r.stderr}`);
      assertOneErrorLine(r.stderr, re);
    }
  });
});

describe('elect', () => {
  test('--listen with a proposal says that --listen takes none', async () => {
    const r = await run(['elect', '--listen', 'x', 'my-proposal', '--endpoints', '127.0.0.1:1']);
    assert.equal(r.code, 2, r.stderr);
    assertOneErrorLine(r.stderr, /--listen observes the election and takes no proposal \(got "my-proposal"\)/);
    const more = await run(['elect', 'x', 'p', 'extra', '--endpoints', '127.0.0.1:1']);
    assert.equal(more.code, 2, more.stderr);
    assertOneErrorLine(more.stderr, /unexpected argument "extra"/);
  });
});

describe('lock --help', () => {
  test('says that a SIGKILLed lock leaves its command running unlocked, and what protects the resource then', async () => {
    const r = await run(['lock', '--help']);
    assert.equal(r.code, 0, r.stderr);
    assert.match(
      r.stdout.replace(/\s+/g, ' '),
      /killed with SIGKILL .*the command keeps running .*no longer locked: after --ttl .*ETCD_LOCK_REV .*fencing token/,
    );
  });
});

describe('dev --etcd', () => {
  test('a version that is not installed: each version found named once, and no unsupported line to install', async (t) => {
    const have = await cachedEtcds();
    const some = have[0];
    if (!some) return t.skip('no etcd in the cache');
    // The same etcd in the cache and on PATH, as when Debian's 3.4.23 is also installed.
    const work = await mkdtemp(path.join(tmpdir(), 'cli-usage-'));
    try {
      const cache = path.join(work, 'cache');
      const bin = path.join(work, 'bin');
      await mkdir(cache);
      await mkdir(bin);
      await symlink(path.dirname(some.etcd), path.join(cache, some.version));
      await symlink(some.etcd, path.join(bin, 'etcd'));
      const env = { ETCD_CACHE_DIR: cache, PATH: `${bin}:${process.env.PATH}` };
      const r = await run(['dev', '--etcd', '3.9'], env);
      assert.equal(r.code, 1, r.stderr);
      assertOneErrorLine(r.stderr, /etcd 3\.9 is not installed/);
      assert.equal(count(r.stderr, new RegExp(some.version.replace(/\./g, '\\.'), 'g')), 1, r.stderr);
      assert.match(r.stderr, /3\.9 is not a line this project supports \(3\.4, 3\.5, 3\.6, 3\.7\)/);
      assert.doesNotMatch(r.stderr, /install etcd 3\.9|install 3\.9/);
      assert.match(r.stderr, /--etcd-binary/);
    } finally {
      await rm(work, { recursive: true, force: true });
    }
  });
});

describe('endpoints with a password in them', () => {
  test('never echoed back, whether the endpoint parses or not', async () => {
    for (const endpoints of [
      'https://root:s3cret@host:bad',
      'https://root:s3cret@host:2379',
      'root:s3cret@127.0.0.1:1',
      'http://a:1,https://root:s3cret@b:2',
      'http://root:s3cret@[::1]:2379/v3',
    ]) {
      for (const args of [
        ['lock', 'x', '--endpoints', endpoints],
        ['inspect', 'x'],
      ]) {
        const r = await run(args, args.includes('--endpoints') ? {} : { ETCDCTL_ENDPOINTS: endpoints });
        assert.equal(r.code, 2, `${endpoints}: ${r.stderr}`);
        assert.doesNotMatch(r.stderr + r.stdout, /s3cret/, endpoints);
        assertOneErrorLine(r.stderr, /user name or password|mix http and https/);
      }
    }
    const r = await run(['lock', 'x', '--endpoints', 'https://root:s3cret@host:2379']);
    assertOneErrorLine(r.stderr, /endpoint "https:\/\/…@host:2379" has a user name or password in it; .*--user/);
  });
});
