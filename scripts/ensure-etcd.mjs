#!/usr/bin/env node
// pretest (and demo/bench/chaos) hook: make sure the newest etcd this machine can provide is in the
// cache, and say which version the tests will run against. The harness picks the same one: with no
// ETCD_VERSION it takes the newest cached version.
//
// Order: ETCD_VERSION if set (installed if missing); else the newest supported line, built when Go
// and the module proxy are there; else the newest already cached; else Debian's 3.5, then 3.4;
// else `etcd` on PATH.

import { spawnSync } from 'node:child_process';
import {
  binaryVersion,
  etcdCacheDir as cacheDir,
  ETCD_LINES as VERSIONS,
  EtcdInstallError,
  findCached,
  goFor,
  install,
  LINES,
  moduleDir,
} from './etcd.mjs';

const say = (msg) => process.stderr.write(`ensure-etcd: ${msg}\n`);
const newest = LINES[LINES.length - 1];

function tryInstall(line) {
  try {
    return install(line);
  } catch (err) {
    if (!(err instanceof EtcdInstallError)) throw err;
    // The command that failed, and the end of its output (the reason).
    const lines = err.message.trim().split('\n');
    say(`could not get etcd ${line}: ${[...new Set([lines[0], ...lines.slice(-2)])].join('\n  ')}`);
    return undefined;
  }
}

function chosen() {
  const requested = process.env.ETCD_VERSION?.trim();
  if (requested) {
    const hit = findCached(requested);
    if (hit) return hit.dir;
    const line = requested.split('.').slice(0, 2).join('.');
    if (!VERSIONS[line])
      throw new EtcdInstallError(`ETCD_VERSION=${requested} is not cached and not a line this script installs (${LINES.join(', ')})`);
    const dir = install(line);
    if (!findCached(requested))
      throw new EtcdInstallError(`ETCD_VERSION=${requested}, but the pinned ${line} is ${VERSIONS[line].version}`);
    return dir;
  }
  const top = findCached(newest);
  if (top) return top.dir;
  const go = goFor(moduleDir(newest));
  if (go.error) say(`etcd ${newest} is built from Go modules and ${go.error}`);
  else {
    const built = tryInstall(newest);
    if (built) return built;
  }
  const any = findCached('newest');
  if (any) return any.dir;
  for (const line of ['3.5', '3.4']) {
    const dir = tryInstall(line);
    if (dir) return dir;
  }
  return undefined;
}

try {
  const dir = chosen();
  if (dir) {
    say(`tests will use etcd ${dir.split('/').pop()} (${dir}); pick another with ETCD_VERSION=3.4 ... 3.7`);
  } else {
    const onPath = spawnSync('sh', ['-c', 'command -v etcd'], { encoding: 'utf8' }).stdout.trim();
    if (!onPath) {
      say(
        `no etcd: nothing in ${cacheDir()}, none could be fetched or built, and none on PATH.\n` +
          `Run \`npm run etcd -- install ${newest}\` (needs Go >= 1.26 at /usr/local/go) or \`npm run etcd -- install 3.4\` ` +
          '(Debian/Ubuntu), or put etcd and etcdctl (v3.4+) on PATH.',
      );
      process.exit(1);
    }
    say(`tests will use etcd ${binaryVersion(onPath) ?? '(unknown version)'} from PATH (${onPath})`);
  }
} catch (err) {
  if (!(err instanceof EtcdInstallError)) throw err;
  say(err.message);
  process.exit(1);
}
