#!/usr/bin/env node
// `npm run etcd -- <command>`: the repository's way to the etcd installer, which ships in the
// package as `etcd-concurrency etcd` (src/launcher/installer.ts, the one implementation). It runs
// from src through tsx, so it needs no build: pretest, demo and CI call it before or without one.

import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';

let mod;
let commands;
try {
  const { tsImport } = await import('tsx/esm/api');
  mod = await tsImport('../src/launcher/install.ts', import.meta.url);
  commands = await tsImport('../src/launcher/installer.ts', import.meta.url);
} catch (err) {
  if (err?.code !== 'ERR_MODULE_NOT_FOUND') throw err;
  process.stderr.write(`etcd: ${err.message}\netcd: run \`npm ci\` first (this script runs the installer from src with tsx)\n`);
  process.exit(1);
}
mod.setInstallerName('npm run etcd --');

// For scripts/ensure-etcd.mjs.
export const { binaryVersion, etcdCacheDir, EtcdInstallError, findCached, goFor, install, LINES, moduleDir, ETCD_LINES } = mod;

if (process.argv[1] && import.meta.url === pathToFileURL(resolve(process.argv[1])).href) {
  const code = commands.installerMain(process.argv.slice(2));
  if (code !== undefined) process.exitCode = code;
}
