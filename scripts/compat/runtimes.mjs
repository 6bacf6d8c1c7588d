#!/usr/bin/env node
// The packed package on Node, Bun and Deno against a real etcd. A fresh project installs the
// package and the runtimes from the registry npm is configured with (the npm packages `bun` and
// `deno` carry their binaries); this Node starts a throwaway etcd with the package's own
// startEtcd() (ETCD_VERSION picks the version, as for the tests), then each runtime runs
// runtime-smoke.mjs (session, mutex and fencing token, fenced write, loss signal and
// diagnostics_channel, partition, election), where the syntax exists runtime-using.mjs
// (`await using`), and the package's command line (`etcd-concurrency lock -c`). Node runs the smoke suite too, as the control: a failure there is not the
// runtime's. At the end no lease or key may be left in etcd. Exit status 1 when anything failed.
//
//   node scripts/compat/runtimes.mjs [--tarball FILE] [--runtimes node,bun,deno] [--bun SPEC] [--deno SPEC] [--keep]
import { copyFile, rm } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { freshProject, npm, npmRegistry, pack, parseArgs, run, tempDir } from './project.mjs';

const USAGE = `usage: node scripts/compat/runtimes.mjs [--tarball FILE] [--runtimes node,bun,deno] [--bun SPEC] [--deno SPEC] [--keep]
  --tarball   the package to install (default: npm pack of this checkout)
  --runtimes  which to run (default: node,bun,deno)
  --bun       the npm package spec of Bun (default: bun@1)
  --deno      the npm package spec of Deno (default: deno@2)
  --keep      leave the temporary project and print where it is
`;
const HERE = path.dirname(fileURLToPath(import.meta.url));
const SMOKE = 'runtime-smoke.mjs';
const USING = 'runtime-using.mjs';
/** One run's limit: the suite takes a few seconds; a handle left open makes it hang until then. */
const RUN_LIMIT_MS = 90_000;

/** The package's command line (`etcd-concurrency lock`), run by each runtime: it holds a lock around a command. */
const CLI = ['node_modules/etcd-concurrency/dist/cli/main.js', 'lock', 'smoke/cli', '-c', 'echo "held $ETCD_LOCK_KEY $ETCD_LOCK_REV"'];

/**
 * How each runtime runs each file: [what, argv]. Deno gets only the permissions the library needs
 * (the network, and the environment for ETCDCTL_ENDPOINTS); the command line runs a command, so -A.
 */
function commands(runtime, bin) {
  switch (runtime) {
    case 'node':
      return [
        [SMOKE, [process.execPath, SMOKE]],
        ['lock (CLI)', [process.execPath, ...CLI]],
      ];
    case 'bun':
      return [
        [SMOKE, [bin, SMOKE]],
        [USING, [bin, USING]],
        ['lock (CLI)', [bin, ...CLI]],
      ];
    case 'deno':
      return [
        [SMOKE, [bin, 'run', '--allow-net', '--allow-env', SMOKE]],
        [USING, [bin, 'run', '--allow-net', '--allow-env', USING]],
        ['lock (CLI)', [bin, 'run', '-A', ...CLI]],
      ];
    default:
      throw new Error(`unknown runtime ${runtime}: node, bun or deno`);
  }
}

/** Whether a run passed: exit 0, then a test file's plan line and no `not ok`, or the command line's `held <key> <token>`. */
function passed(what, r) {
  if (r.code !== 0 || r.timedOut) return false;
  if (what === SMOKE || what === USING) return /^1\.\.\d+$/m.test(r.stdout) && !/^not ok /m.test(r.stdout);
  return /^held smoke\/cli\/[0-9a-f]+ \d+$/m.test(r.stdout);
}

async function main() {
  const options = parseArgs(process.argv.slice(2), ['tarball', 'runtimes', 'bun', 'deno'], USAGE);
  const started = performance.now();
  const runtimes = (options.runtimes ?? 'node,bun,deno').split(',');
  for (const r of runtimes) commands(r, '');
  const specs = { bun: options.bun ?? 'bun@1', deno: options.deno ?? 'deno@2' };
  const work = await tempDir('runtimes');
  const app = path.join(work, 'app');
  const failures = [];
  let etcd;
  try {
    let tarball = options.tarball && path.resolve(options.tarball);
    if (tarball) await copyFile(tarball, path.join(work, path.basename(tarball)));
    else tarball = await pack(work);
    await freshProject(app, 'module');
    await npm(['install', tarball, ...runtimes.filter((r) => r !== 'node').map((r) => specs[r])], app);
    for (const f of [SMOKE, USING]) await copyFile(path.join(HERE, f), path.join(app, f));
    console.log(`installed in ${((performance.now() - started) / 1000).toFixed(1)} s`);

    // The package's own launcher and client, as installed.
    const pkg = (entry) => import(pathToFileURL(path.join(app, 'node_modules/etcd-concurrency/dist', entry)).href);
    const { startEtcd } = await pkg('testing/index.js');
    const { Client } = await pkg('index.js');
    etcd = await startEtcd({ members: 1 });
    console.log(`etcd ${etcd.version} at ${etcd.endpoints.join(',')}`);
    const env = {
      ...process.env,
      ETCDCTL_ENDPOINTS: etcd.endpoints.join(','),
      NO_COLOR: '1',
      // Deno fetches nothing here (node_modules is there), but if it did, from npm's registry.
      NPM_CONFIG_REGISTRY: await npmRegistry(),
      DENO_DIR: path.join(work, 'deno-cache'),
      DENO_NO_UPDATE_CHECK: '1',
    };

    for (const runtime of runtimes) {
      const bin = path.join(app, 'node_modules/.bin', runtime);
      if (runtime !== 'node') {
        const v = await run(bin, ['--version'], { cwd: app, env, timeoutMs: 30_000 });
        if (v.code !== 0) {
          failures.push(`${runtime}: ${bin} --version exited ${v.code}: ${v.stdout}${v.stderr}`);
          continue;
        }
        console.log(`\n${runtime} ${v.stdout.split('\n')[0].replace(/^deno /, '')}`);
      } else console.log(`\nnode ${process.versions.node} (the control)`);
      for (const [file, [cmd, ...args]] of commands(runtime, bin)) {
        const r = await run(cmd, args, { cwd: app, env, timeoutMs: RUN_LIMIT_MS });
        if (r.stdout.trim()) console.log(r.stdout.trimEnd().replace(/^/gm, '  '));
        if (passed(file, r)) console.log(`  ${runtime} ${file}: ok (${(r.ms / 1000).toFixed(1)} s)`);
        else {
          const why = r.timedOut ? `still running after ${RUN_LIMIT_MS / 1000} s (a handle left open?)` : `exit ${r.code}`;
          console.log(`  ${runtime} ${file}: FAILED, ${why}`);
          if (r.stderr.trim()) console.log(r.stderr.trimEnd().replace(/^/gm, '  | '));
          failures.push(`${runtime} ${file}: ${why}`);
        }
      }
    }

    const client = new Client({ endpoints: etcd.endpoints });
    try {
      const leases = await client.leaseLeases();
      const keys = (await client.getPrefix('')).kvs.map((kv) => kv.key.toString());
      if (leases.length > 0 || keys.length > 0)
        failures.push(`left in etcd after the runs: ${leases.length} lease(s), keys ${JSON.stringify(keys.slice(0, 10))}`);
    } finally {
      await client.close();
    }
  } finally {
    await etcd?.stop();
    if (options.keep) console.log(`kept ${work}`);
    else await rm(work, { recursive: true, force: true });
  }
  const took = `${((performance.now() - started) / 1000).toFixed(1)} s`;
  if (failures.length === 0) console.log(`\nok: ${runtimes.join(', ')} in ${took}`);
  else {
    console.log(`\nFAILED (${took}):\n${failures.map((f) => `  ${f}`).join('\n')}`);
    process.exitCode = 1;
  }
}

await main();
