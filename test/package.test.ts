// The package as a user gets it: `npm pack` on a clean copy of the
// project (its prepack script builds dist from scratch), the tarball's contents checked, then
// installed into a fresh project (from the tarball; its dependencies from the npm cache or registry)
// where a README-like program runs against a real etcd as ESM, as CommonJS (`require`, which needs
// Node >= 20.19), and as TypeScript compiled with --strict under `nodenext`, both module kinds.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile, spawn, spawnSync } from 'node:child_process';
import { once } from 'node:events';
import { createServer, type Server } from 'node:net';
import { cp, mkdir, mkdtemp, readFile, readdir, rm, stat, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import type { Client } from '../src/index.js';
import type { EtcdCluster } from '../src/testing/index.js';
import { etcdForFile } from './helpers.js';

const run = promisify(execFile);
const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const TSC = path.join(root, 'node_modules/typescript/bin/tsc');
const ROOT = 'test/package/';
let etcd: EtcdCluster;
let client: Client;
const fresh = etcdForFile(ROOT, (e, c) => ((etcd = e), (client = c)));

let work: string;
let consumer: string;
let files: string[];
let pkg: { license?: string; engines?: { node?: string }; exports: Record<string, unknown> };

const [major, minor] = process.versions.node.split('.').map(Number) as [number, number];
const canRequireEsm = major > 22 || (major === 22 && minor >= 12) || (major === 20 && minor >= 19);

/** npm with a quiet, offline-first configuration (the dependencies are in the cache after `npm ci`). */
function npm(args: string[], cwd: string): Promise<{ stdout: string; stderr: string }> {
  return run('npm', [...args, '--prefer-offline', '--no-audit', '--no-fund', '--loglevel=error'], {
    cwd,
    maxBuffer: 64 << 20,
    env: { ...process.env, npm_config_update_notifier: 'false' },
  });
}

before(async () => {
  work = await mkdtemp(path.join(tmpdir(), 'etcd-concurrency-package-'));
  // Pack a copy holding what a clean checkout holds for the package, so that files lying around in
  // this working tree (an old dist, scratch files) cannot hide or add anything.
  const stage = path.join(work, 'stage');
  const manifest = JSON.parse(await readFile(path.join(root, 'package.json'), 'utf8')) as { files: string[] };
  await mkdir(stage);
  for (const f of ['package.json', 'tsconfig.json', 'README.md', 'CONTRIBUTING.md', 'LICENSE', 'src', 'docs', 'etcd']) {
    await cp(path.join(root, f), path.join(stage, f), { recursive: true });
  }
  assert.ok(manifest.files.includes('dist'), 'files lists dist');
  await symlink(path.join(root, 'node_modules'), path.join(stage, 'node_modules'), 'dir');
  const packs = path.join(work, 'packs');
  await mkdir(packs);
  const { stdout } = await npm(['pack', '--json', '--pack-destination', packs], stage);
  // npm prints the prepack script's output before the JSON.
  const report = JSON.parse(stdout.slice(stdout.indexOf('\n[') + 1)) as { filename: string; files: { path: string }[] }[];
  files = report[0]!.files.map((f) => f.path);
  const tarball = path.join(packs, report[0]!.filename);

  consumer = path.join(work, 'consumer');
  await mkdir(consumer);
  await writeFile(path.join(consumer, 'package.json'), JSON.stringify({ name: 'consumer', private: true, version: '1.0.0' }));
  await npm(['install', tarball], consumer);
  pkg = JSON.parse(await readFile(path.join(consumer, 'node_modules/etcd-concurrency/package.json'), 'utf8')) as typeof pkg;
});

after(async () => {
  if (work) await rm(work, { recursive: true, force: true });
});

/** Every package installed under `modules` (nested node_modules too), by name. */
async function packagesUnder(modules: string): Promise<string[]> {
  const out: string[] = [];
  const entries = await readdir(modules, { withFileTypes: true }).catch(() => []);
  for (const e of entries) {
    if (!e.isDirectory() || e.name.startsWith('.')) continue;
    const dirs = e.name.startsWith('@') ? (await readdir(path.join(modules, e.name))).map((n) => path.join(e.name, n)) : [e.name];
    for (const d of dirs) {
      out.push(d.split(path.sep).join('/'));
      out.push(...(await packagesUnder(path.join(modules, d, 'node_modules'))));
    }
  }
  return out;
}

/** Bytes of the files under `dir`. */
async function sizeOf(dir: string): Promise<number> {
  let total = 0;
  for (const e of await readdir(dir, { withFileTypes: true })) {
    const p = path.join(dir, e.name);
    if (e.isDirectory()) total += await sizeOf(p);
    else if (e.isFile()) total += (await stat(p)).size;
  }
  return total;
}

/** The README's programs in one: a lock with its fencing token, withLock guarding a Txn, an election. */
function program(kind: 'esm' | 'cjs' | 'ts'): string {
  const typed = kind === 'ts';
  const imports =
    kind === 'cjs'
      ? `const { Client, Session, Mutex, withLock, op, Election } = require('etcd-concurrency');\n` +
        `const testing = require('etcd-concurrency/testing');\n` +
        `const fencing = require('etcd-concurrency/fencing');\n`
      : `import { Client, Session, Mutex, withLock, op, Election${typed ? ', type LockHandle' : ''} } from 'etcd-concurrency';\n` +
        `import * as testing from 'etcd-concurrency/testing';\n` +
        `import * as fencing from 'etcd-concurrency/fencing';\n`;
  return `${imports}
async function main()${typed ? ': Promise<void>' : ''} {
  if (typeof testing.startEtcd !== 'function' || typeof testing.startProxy !== 'function') throw new Error('etcd-concurrency/testing');
  if (typeof fencing.PostgresFence !== 'function' || typeof fencing.RedisFence !== 'function') throw new Error('etcd-concurrency/fencing');
  const prefix = process.env.PREFIX${typed ? '!' : ''};
  const client = new Client({ endpoints: process.env.ENDPOINTS${typed ? '!' : ''}.split(',') });
  const session = await Session.create(client, { ttl: 30 });

  const lock${typed ? ': LockHandle' : ''} = await new Mutex(session, prefix + 'locks/card-8801').lock({ signal: AbortSignal.timeout(10_000) });
  try {
    lock.assertHeld();
    // Fencing tokens are bigints: JSON.stringify needs String(token).
    console.log(JSON.stringify({ token: String(lock.fencingToken) }));
  } finally {
    await lock.unlock();
  }

  const total = await withLock(session, prefix + 'locks/ledger', async (held) => {
    const r = await client.txn({ compare: [held.ownerCompare()], success: [op.put(prefix + 'ledger/total', '42')], failure: [] });
    return r.succeeded ? 42 : undefined;
  });
  console.log('total', total);
  await client.delete(prefix + 'ledger/total');

  const election = new Election(session, prefix + 'app/scheduler');
  const leader = await election.campaign('instance-01');
  const current = await election.leader();
  console.log('leader', current?.value);
  await leader.resign();

  await session.close();
  await client.close();
}
main().then(() => console.log('done'), (err) => { console.error(err); process.exitCode = 1; });
`;
}

/** Runs `file` in the consumer project against the test's etcd and checks the program's output. */
async function runProgram(file: string, scope: string): Promise<void> {
  const { stdout, stderr } = await run(process.execPath, [file], {
    cwd: consumer,
    env: { ...process.env, ENDPOINTS: etcd.endpoints.join(','), PREFIX: fresh(scope) },
  });
  const lines = stdout.trimEnd().split('\n');
  assert.match(lines[0]!, /^\{"token":"\d+"\}$/, stdout + stderr);
  assert.deepEqual(lines.slice(1), ['total 42', 'leader instance-01', 'done'], stdout + stderr);
  assert.doesNotMatch(stderr, /Error/, stderr);
  assert.ok((await client.leaseLeases()).length === 0, 'the program left a lease');
}

/** A TypeScript project in the consumer: `type` module or commonjs, --strict, nodenext. */
async function typescriptProject(dir: string, type: 'module' | 'commonjs'): Promise<string> {
  const projectDir = path.join(consumer, dir);
  await mkdir(projectDir, { recursive: true });
  await writeFile(path.join(projectDir, 'package.json'), JSON.stringify({ type }));
  await writeFile(
    path.join(projectDir, 'tsconfig.json'),
    JSON.stringify({
      compilerOptions: {
        target: 'ES2022',
        module: 'nodenext',
        moduleResolution: 'nodenext',
        strict: true,
        outDir: 'out',
        skipLibCheck: false,
        types: ['node'],
        typeRoots: [path.join(root, 'node_modules/@types')],
      },
      files: ['main.ts'],
    }),
  );
  await writeFile(path.join(projectDir, 'main.ts'), program('ts'));
  try {
    await run(process.execPath, [TSC, '-p', projectDir], { cwd: projectDir });
  } catch (err) {
    const e = err as { stdout?: string; stderr?: string };
    assert.fail(`tsc failed in the ${type} project:\n${e.stdout ?? ''}${e.stderr ?? ''}`);
  }
  return path.join(projectDir, 'out/main.js');
}

describe('npm pack', () => {
  test('the tarball holds what a user needs and nothing else', () => {
    for (const f of [
      'package.json',
      'README.md',
      'LICENSE',
      'dist/index.js',
      'dist/index.d.ts',
      'dist/index.d.ts.map',
      'dist/index.js.map',
      'dist/testing/index.js',
      'dist/testing/index.d.ts',
      'dist/fencing/index.js',
      'dist/fencing/index.d.ts',
      'dist/cli/main.js',
      'dist/cli/web/app.js',
      'dist/cli/web/words.js',
      'src/index.ts',
      // The installer's Go modules (etcd-concurrency etcd install 3.6/3.7 builds them).
      'etcd/v3.7/go.mod',
      'etcd/v3.7/go.sum',
      'etcd/v3.7/etcd/main.go',
      'etcd/v3.7/etcdctl/main.go',
      'etcd/v3.6/go.mod',
    ]) {
      assert.ok(files.includes(f), `${f} is missing from the package`);
    }
    const goModule = /^etcd\/(README\.md|v\d+\.\d+\/(go\.mod|go\.sum|etcd\/main\.go|etcdctl\/main\.go))$/;
    const outside = files.filter(
      (f) => (/^(test|bench|chaos|examples|scripts|interop|etcd|scratch|\.ci)\//.test(f) && !goModule.test(f)) || f.startsWith('.'),
    );
    assert.deepEqual(outside, [], 'development files in the package');
    // dist holds the build of src and nothing stale: each compiled file has its source.
    // A source may be TypeScript, or a script served as it is (the web inspector's page).
    const hasSource = (f: string): boolean =>
      files.includes(`src/${f.slice(5).replace(/\.(js|d\.ts)(\.map)?$/, '.ts')}`) || files.includes(`src/${f.slice(5)}`);
    const stale = files.filter((f) => f.startsWith('dist/') && !hasSource(f));
    assert.deepEqual(stale, [], 'dist files without a source');
    assert.equal(pkg.license, 'Apache-2.0');
  });

  test("the README's relative links point at files in the package", async () => {
    const readme = await readFile(path.join(consumer, 'node_modules/etcd-concurrency/README.md'), 'utf8');
    const links = [...readme.matchAll(/\]\(([^)#\s]+)(?:#[^)]*)?\)/g)].map((m) => m[1]!).filter((l) => !/^[a-z]+:/i.test(l));
    assert.ok(links.length > 0);
    for (const l of links) assert.ok(files.includes(path.posix.normalize(l)), `README links ${l}, which the package does not contain`);
  });

  test('npm install brings 3 packages (this one, @bufbuild/protobuf, @opentelemetry/api) and at most 10 MB', async () => {
    const modules = path.join(consumer, 'node_modules');
    const installed = await packagesUnder(modules);
    assert.deepEqual(installed.sort(), ['@bufbuild/protobuf', '@opentelemetry/api', 'etcd-concurrency']);
    const bytes = await sizeOf(modules);
    assert.ok(bytes <= 10 * 2 ** 20, `node_modules holds ${(bytes / 2 ** 20).toFixed(1)} MB`);
  });

  test('--metrics without the optional OpenTelemetry SDK: exit 2 and the packages to install', async () => {
    const cli = path.join(consumer, 'node_modules/etcd-concurrency/dist/cli/main.js');
    const r = await run(
      process.execPath,
      [cli, 'lock', `${fresh('metrics')}x`, '--endpoints', etcd.endpoints[0]!, '--metrics', '127.0.0.1:0', '--', 'true'],
      { cwd: consumer },
    ).then(
      () => assert.fail('--metrics ran without the SDK'),
      (err: { code?: number; stderr?: string }) => err,
    );
    assert.equal(r.code, 2, r.stderr);
    assert.match(r.stderr ?? '', /npm install @opentelemetry\/sdk-metrics @opentelemetry\/exporter-prometheus/);
  });

  test('LICENSE is the Apache License 2.0 text', async () => {
    const text = await readFile(path.join(consumer, 'node_modules/etcd-concurrency/LICENSE'), 'utf8');
    assert.match(text, /Apache License\s+Version 2\.0, January 2004/);
    assert.match(text, /END OF TERMS AND CONDITIONS/);
  });

  test('every entry point offers import and require', () => {
    for (const entry of ['.', './testing', './fencing']) {
      const conditions = pkg.exports[entry] as Record<string, string>;
      assert.ok(conditions.types && conditions.import && conditions.default, `${entry}: ${JSON.stringify(conditions)}`);
    }
  });
});

describe('the installed package runs a README program against a real etcd', () => {
  test('as an ES module (import)', { timeout: 60_000 }, async () => {
    await writeFile(path.join(consumer, 'esm.mjs'), program('esm'));
    await runProgram('esm.mjs', 'esm');
  });

  test('as CommonJS (require), on Node >= 20.19', {
    timeout: 60_000,
    skip: !canRequireEsm && 'this Node cannot require() ES modules',
  }, async () => {
    await writeFile(path.join(consumer, 'cjs.cjs'), program('cjs'));
    await runProgram('cjs.cjs', 'cjs');
  });

  test('TypeScript --strict, nodenext, an ES module project: compiles and runs', { timeout: 120_000 }, async () => {
    await runProgram(await typescriptProject('ts-esm', 'module'), 'ts-esm');
  });

  test('TypeScript --strict, nodenext, a CommonJS project: compiles to require() and runs', {
    timeout: 120_000,
    skip: !canRequireEsm && 'this Node cannot require() ES modules',
  }, async () => {
    const out = await typescriptProject('ts-cjs', 'commonjs');
    assert.match(await readFile(out, 'utf8'), /require\("etcd-concurrency"\)/);
    await runProgram(out, 'ts-cjs');
  });
});

/** The installed package's command, as `npx etcd-concurrency` runs it. */
function bin(args: string[], env: NodeJS.ProcessEnv): Promise<{ stdout: string; stderr: string }> {
  return run(path.join(consumer, 'node_modules/.bin/etcd-concurrency'), args, {
    cwd: consumer,
    env: { ...process.env, ...env },
    maxBuffer: 16 << 20,
  });
}

/** Debian's etcd 3.4.23 in /usr/bin: the installer copies it, so this needs no network. */
const debianEtcd = (() => {
  const r = spawnSync('/usr/bin/etcd', ['--version'], { encoding: 'utf8' });
  return /etcd Version: 3\.4\.23\b/.test(r.stdout ?? '');
})();

describe('a package user gets an etcd', () => {
  test('`etcd-concurrency etcd install 3.4` fills an empty cache; `etcd list` shows it; `dev` runs it; a README program locks on it', {
    timeout: 120_000,
    skip: !debianEtcd && "needs Debian's etcd 3.4.23 in /usr/bin (apt-get install etcd-server etcd-client)",
  }, async () => {
    const cache = path.join(work, 'etcd-cache');
    const env = { ETCD_CACHE_DIR: cache, ETCD_VERSION: '' };
    const before = await bin(['etcd', 'list'], env);
    assert.match(before.stdout, /^3\.4 +not installed: etcd-concurrency etcd install 3\.4/m, before.stdout);
    const installed = await bin(['etcd', 'install', '3.4'], env);
    assert.equal(installed.stdout.trim(), path.join(cache, '3.4.23'), installed.stdout + installed.stderr);
    const after = await bin(['etcd', 'list'], env);
    assert.match(after.stdout, new RegExp(`^3\\.4\\.23 +${path.join(cache, '3.4.23')}`, 'm'), after.stdout);

    // dev finds it in the cache (free ports: this test must not depend on 2379).
    const [port] = await freePortPair();
    const dev = spawn(path.join(consumer, 'node_modules/.bin/etcd-concurrency'), ['dev', '--base-port', String(port)], {
      env: { ...process.env, ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    try {
      const endpoints = await new Promise<string>((resolve, reject) => {
        let out = '';
        dev.stdout!.on('data', (d: Buffer) => {
          out += d.toString();
          const m = /^export ETCDCTL_ENDPOINTS=(\S+)$/m.exec(out);
          if (m) resolve(m[1]!);
        });
        dev.once('exit', (code) => reject(new Error(`dev exited with ${code}: ${out}`)));
      });
      await writeFile(path.join(consumer, 'dev.mjs'), program('esm'));
      const { stdout } = await run(process.execPath, ['dev.mjs'], {
        cwd: consumer,
        env: { ...process.env, ENDPOINTS: endpoints, PREFIX: 'pkg-dev/' },
      });
      assert.match(stdout, /leader instance-01\ndone/);
    } finally {
      dev.kill('SIGINT');
      await once(dev, 'exit');
    }
  });

  test('`dev --etcd-binary` runs the etcd it is given', {
    timeout: 60_000,
    skip: !debianEtcd && "needs Debian's etcd 3.4.23 in /usr/bin",
  }, async () => {
    const [port] = await freePortPair();
    const dev = spawn(
      path.join(consumer, 'node_modules/.bin/etcd-concurrency'),
      ['dev', '--etcd-binary', '/usr/bin/etcd', '--base-port', String(port)],
      {
        env: { ...process.env, ETCD_CACHE_DIR: path.join(work, 'empty-cache'), ETCD_VERSION: '' },
        stdio: ['ignore', 'pipe', 'pipe'],
      },
    );
    try {
      let out = '';
      for await (const d of dev.stdout!) {
        out += (d as Buffer).toString();
        if (/export ETCDCTL_ENDPOINTS=/.test(out)) break;
      }
      assert.match(out, /^etcd 3\.4\.23 is running/m, out);
    } finally {
      dev.kill('SIGINT');
      await once(dev, 'exit');
    }
  });
});

/** Two adjacent free ports (client, peer) for a one-member dev, found by asking the OS. */
async function freePortPair(): Promise<number[]> {
  for (;;) {
    const a = await listenOn(0);
    const port = (a.address() as { port: number }).port;
    const b = await listenOn(port + 1).catch(() => undefined);
    await new Promise((r) => a.close(r));
    if (b) {
      await new Promise((r) => b.close(r));
      return [port, port + 1];
    }
  }
}

function listenOn(port: number): Promise<Server> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(port, '127.0.0.1', () => resolve(s));
  });
}

describe("the README's project setup", () => {
  test('an ES module project with the README tsconfig compiles `await using` and runs it on this Node', { timeout: 120_000 }, async () => {
    const readme = await readFile(path.join(consumer, 'node_modules/etcd-concurrency/README.md'), 'utf8');
    const box = /### Setting up a project[\s\S]*?```json\n([\s\S]*?)```/.exec(readme);
    assert.ok(box, 'the README has a tsconfig under "Setting up a project"');
    assert.match(readme, /npm pkg set type=module/, 'and makes the project a module');
    const tsconfig = JSON.parse(box[1]!) as { compilerOptions: Record<string, unknown> };
    const dir = path.join(consumer, 'setup-box');
    const rootDir = String(tsconfig.compilerOptions.rootDir ?? '.');
    await mkdir(path.join(dir, rootDir), { recursive: true });
    await writeFile(path.join(dir, 'package.json'), JSON.stringify({ type: 'module' }));
    // The box as it is; only @types/node comes from this checkout (the consumer has not installed it).
    await writeFile(
      path.join(dir, 'tsconfig.json'),
      JSON.stringify({
        ...tsconfig,
        compilerOptions: { ...tsconfig.compilerOptions, typeRoots: [path.join(root, 'node_modules/@types')] },
      }),
    );
    await writeFile(
      path.join(dir, rootDir, 'main.ts'),
      `import { Client, Mutex, Session } from 'etcd-concurrency';
const client = new Client(); // ETCDCTL_ENDPOINTS, as dev prints it
{
  await using session = await Session.create(client);
  await using lock = await new Mutex(session, process.env.PREFIX + 'setup-box').lock();
  console.log('held', String(lock.fencingToken));
}
await client.close();
`,
    );
    await run(process.execPath, [TSC, '-p', dir], { cwd: dir }).catch((err: { stdout?: string }) =>
      assert.fail(`tsc: ${err.stdout ?? ''}`),
    );
    const { stdout } = await run(process.execPath, [path.join(dir, String(tsconfig.compilerOptions.outDir ?? '.'), 'main.js')], {
      cwd: dir,
      env: { ...process.env, ETCDCTL_ENDPOINTS: etcd.endpoints.join(','), PREFIX: fresh('setup-box') },
    });
    assert.match(stdout, /^held \d+$/m);
    assert.deepEqual(await client.leaseLeases(), [], 'await using closed the session');
  });
});
