#!/usr/bin/env node
// The README's TypeScript setup with every TypeScript major a user may get, from the registry npm
// is configured with. For each major (5, 6, 7 and whatever `latest` is; its newest stable release)
// a fresh project installs the packed package, that TypeScript and @types/node, as the README's
// setup does, then:
//   setup         README's tsconfig box as tsconfig.json, README's quick start as <rootDir>/main.ts
//                 and a file with `await using`; `tsc` as the README says (`npx tsc`), then the
//                 output runs on this Node (which proves `await using` was lowered for Node 20).
//   declarations  a file using every entry point (etcd-concurrency, /fencing, /testing), strict,
//                 WITHOUT skipLibCheck: our published .d.ts are checked, under nodenext and again
//                 under `bundler` resolution (Bun's and Vite's default). The README box itself has
//                 skipLibCheck, which other packages' types need (ioredis 6's do).
//   commonjs      a `type: commonjs` project under nodenext (README: TypeScript >= 5.8): compiles
//                 to require() and runs on this Node.
// Exit status 1 when a check failed; each failure prints the compiler's output.
//
//   node scripts/compat/typescript.mjs [--tarball FILE] [--majors 5,6,7] [--readme FILE] [--keep]
import { copyFile, mkdir, readFile, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { freshProject, npm, pack, parseArgs, root, run, tempDir } from './project.mjs';
import { layout, quickStart, setupTsconfig } from './readme.mjs';

const USAGE = `usage: node scripts/compat/typescript.mjs [--tarball FILE] [--majors 5,6,7] [--readme FILE] [--keep]
  --tarball  the package to install (default: npm pack of this checkout)
  --majors   TypeScript majors to check (default: 5, 6, 7 and the major of the registry's latest)
  --readme   the README whose tsconfig box and quick start are compiled (default: README.md)
  --keep     leave the temporary projects and print where they are
`;

/** The majors checked by default; the registry's `latest` is added when it is another one. */
export const MAJORS = [5, 6, 7];

/**
 * The TypeScript release checked for each major: its newest stable version (no -beta, -rc, -dev).
 * `registry` is `npm view typescript versions dist-tags --json`. Throws for a major without one.
 */
export function typescriptReleases(registry, majors = MAJORS) {
  const stable = registry.versions.filter((v) => /^\d+\.\d+\.\d+$/.test(v));
  const latest = Number(registry['dist-tags'].latest.split('.')[0]);
  const wanted = [...new Set([...majors, latest])].sort((a, b) => a - b);
  return wanted.map((major) => {
    const ofMajor = stable.filter((v) => Number(v.split('.')[0]) === major);
    if (ofMajor.length === 0)
      throw new Error(`typescript ${major}.x: the registry has no stable release (latest is ${registry['dist-tags'].latest})`);
    return ofMajor.sort(compareVersions).at(-1);
  });
}

function compareVersions(a, b) {
  const [x, y] = [a, b].map((v) => v.split('.').map(Number));
  for (let i = 0; i < 3; i++) if (x[i] !== y[i]) return x[i] - y[i];
  return 0;
}

/** Every entry point, each export used, so that each declaration it references gets checked. */
const ENTRIES = `import * as root from 'etcd-concurrency';
import * as fencing from 'etcd-concurrency/fencing';
import * as testing from 'etcd-concurrency/testing';
import type { ClientOptions, LockHandle, LeaderHandle, PermitHandle, RWLockHandle } from 'etcd-concurrency';
import type { FencingHandle, PostgresFenceOptions, RedisFenceOptions } from 'etcd-concurrency/fencing';
import type { EtcdCluster, StartEtcdOptions, TcpProxy } from 'etcd-concurrency/testing';

export type Handles = [LockHandle, LeaderHandle, PermitHandle, RWLockHandle, FencingHandle];
export type Options = [ClientOptions, PostgresFenceOptions, RedisFenceOptions, StartEtcdOptions];
export type Testing = [EtcdCluster, TcpProxy];
export const entries = { root, fencing, testing };
export const client: root.Client = new root.Client({ endpoints: ['127.0.0.1:2379'] });
await using cluster = await testing.startEtcd({ members: 1 });
console.log(Object.keys(entries).length, client.endpoints, cluster.endpoints);
`;

/** `await using` as the README's later examples write it; runs without an etcd (nothing connects). */
const USING = `import { Client } from 'etcd-concurrency';

let used: Client | undefined;
{
  await using client = new Client({ endpoints: ['127.0.0.1:2379'] });
  used = client;
}
console.log(used.closed ? 'disposed' : 'not disposed');
`;

/** A CommonJS consumer: compiled to require() calls of the ES module package. */
const CJS = `import { Client, Mutex, Session } from 'etcd-concurrency';
import { PostgresFence, RedisFence } from 'etcd-concurrency/fencing';
import { startEtcd } from 'etcd-concurrency/testing';

const kinds = [Client, Mutex, Session, PostgresFence, RedisFence, startEtcd].map((f) => typeof f);
console.log(kinds.every((k) => k === 'function') ? 'required' : kinds.join(' '));
`;

const DECLARATION_OPTIONS = {
  target: 'es2022',
  lib: ['es2023', 'esnext.disposable'],
  types: ['node'],
  strict: true,
  skipLibCheck: false,
  noEmit: true,
};

/** One check: `tsc -p dir` passes, then `expect` (if any) holds. Resolves with a failure text or undefined. */
async function compiles(dir, tsc) {
  const r = await run(process.execPath, [tsc, '-p', dir], { cwd: dir, timeoutMs: 180_000 });
  if (r.code === 0) return undefined;
  const out = `${r.stdout}${r.stderr}`.trimEnd().split('\n');
  const shown = out.slice(0, 40).join('\n') + (out.length > 40 ? `\n... ${out.length - 40} more lines` : '');
  return `tsc -p ${path.relative(path.dirname(dir), dir) || '.'} exited ${r.timedOut ? 'on its time limit' : r.code}:\n${shown}`;
}

/** Runs a compiled file on this Node; resolves with a failure text unless it prints `expected`. */
async function prints(file, expected) {
  const r = await run(process.execPath, [file], { cwd: path.dirname(file), timeoutMs: 30_000 });
  if (r.code === 0 && r.stdout.trim() === expected) return undefined;
  return `node ${path.basename(file)} exited ${r.code}, printed ${JSON.stringify(r.stdout.trim())} (expected ${JSON.stringify(expected)}):\n${r.stderr}`;
}

async function checkVersion(version, { tarball, readme, dir }) {
  const box = setupTsconfig(readme);
  const { rootDir, outDir } = layout(box.json);
  await freshProject(dir, 'module');
  // As the README's setup: the package, then TypeScript and @types/node.
  await npm(['install', tarball, `typescript@${version}`, '@types/node'], dir);
  const tsc = path.join(dir, 'node_modules/typescript/bin/tsc');
  const installed = JSON.parse(await readFile(path.join(dir, 'node_modules/typescript/package.json'), 'utf8')).version;
  if (installed !== version) throw new Error(`npm installed typescript ${installed} for ${version}`);
  const results = {};

  // setup: the project directory itself, as the README's newcomer has it.
  await writeFile(path.join(dir, 'tsconfig.json'), box.text);
  await mkdir(path.join(dir, rootDir), { recursive: true });
  await writeFile(path.join(dir, rootDir, 'main.ts'), quickStart(readme));
  await writeFile(path.join(dir, rootDir, 'using.ts'), USING);
  results.setup = (await compiles(dir, tsc)) ?? (await prints(path.join(dir, outDir, 'using.js'), 'disposed'));

  for (const [name, resolution] of [
    ['declarations', { module: 'nodenext', moduleResolution: 'nodenext' }],
    ['declarations (bundler)', { module: 'preserve', moduleResolution: 'bundler' }],
  ]) {
    const d = path.join(dir, name.replace(/\W+/g, '-').replace(/-$/, ''));
    await mkdir(d, { recursive: true });
    await writeFile(
      path.join(d, 'tsconfig.json'),
      JSON.stringify({ compilerOptions: { ...DECLARATION_OPTIONS, ...resolution }, files: ['entries.ts'] }),
    );
    await writeFile(path.join(d, 'entries.ts'), ENTRIES);
    results[name] = await compiles(d, tsc);
  }

  const cjs = path.join(dir, 'cjs');
  await freshProject(cjs, 'commonjs');
  await writeFile(
    path.join(cjs, 'tsconfig.json'),
    JSON.stringify({
      // The declarations' own check is above: here only the CommonJS consumer's side.
      compilerOptions: {
        ...DECLARATION_OPTIONS,
        module: 'nodenext',
        moduleResolution: 'nodenext',
        skipLibCheck: true,
        noEmit: false,
        rootDir: '.',
        outDir: 'out',
      },
      files: ['main.ts'],
    }),
  );
  await writeFile(path.join(cjs, 'main.ts'), CJS);
  results.commonjs =
    (await compiles(cjs, tsc)) ??
    (/require\("etcd-concurrency"\)/.test(await readFile(path.join(cjs, 'out/main.js'), 'utf8'))
      ? await prints(path.join(cjs, 'out/main.js'), 'required')
      : 'out/main.js has no require("etcd-concurrency"): not compiled to CommonJS');
  return results;
}

async function main() {
  const options = parseArgs(process.argv.slice(2), ['tarball', 'majors', 'readme'], USAGE);
  const started = performance.now();
  const readme = await readFile(options.readme ?? path.join(root, 'README.md'), 'utf8');
  // Both fail early, with what is missing, before anything is downloaded.
  setupTsconfig(readme);
  quickStart(readme);
  const registry = JSON.parse(await npm(['view', 'typescript', 'versions', 'dist-tags', '--json'], root));
  const versions = typescriptReleases(registry, options.majors ? options.majors.split(',').map(Number) : MAJORS);
  console.log(`typescript: registry latest ${registry['dist-tags'].latest}; checking ${versions.join(', ')}`);

  const work = await tempDir('typescript');
  let failed = 0;
  try {
    let tarball = options.tarball && path.resolve(options.tarball);
    if (tarball) await copyFile(tarball, path.join(work, path.basename(tarball)));
    else {
      tarball = await pack(work);
      console.log(`packed ${path.basename(tarball)} (${Math.round(performance.now() - started)} ms)`);
    }
    for (const version of versions) {
      const t = performance.now();
      let results;
      try {
        results = await checkVersion(version, { tarball, readme, dir: path.join(work, `ts-${version}`) });
      } catch (err) {
        results = { install: err.message };
      }
      const line = Object.entries(results).map(([name, failure]) => `${name} ${failure ? 'FAIL' : 'ok'}`);
      console.log(`typescript ${version}: ${line.join(', ')} (${((performance.now() - t) / 1000).toFixed(1)} s)`);
      for (const [name, failure] of Object.entries(results)) {
        if (!failure) continue;
        failed++;
        console.log(`  ${name}: ${failure.replace(/\n/g, '\n    ')}`);
      }
    }
  } finally {
    if (options.keep) console.log(`kept ${work}`);
    else await rm(work, { recursive: true, force: true });
  }
  console.log(`${failed === 0 ? 'ok' : `${failed} check(s) failed`} in ${((performance.now() - started) / 1000).toFixed(1)} s`);
  if (failed > 0) process.exitCode = 1;
}

if (process.argv[1] && import.meta.url === pathToFileURL(path.resolve(process.argv[1])).href) await main();
