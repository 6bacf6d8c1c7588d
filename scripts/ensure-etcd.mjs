#!/usr/bin/env node
// pretest hook: the tests run against a real etcd, so make sure etcd and etcdctl exist before
// spending time on a build. Silent when they do; installs them on root+apt boxes (CI containers).

import { spawnSync } from 'node:child_process';
import { accessSync, constants } from 'node:fs';
import { delimiter, join } from 'node:path';

const onPath = (name) =>
  (process.env.PATH ?? '').split(delimiter).some((dir) => {
    try {
      accessSync(join(dir, name), constants.X_OK);
      return true;
    } catch {
      return false;
    }
  });

const missing = () => ['etcd', 'etcdctl'].filter((name) => !onPath(name));

if (missing().length === 0) process.exit(0);

const howTo =
  'Install Debian/Ubuntu\'s etcd:  sudo apt-get install etcd-server etcd-client\n' +
  'or put etcd and etcdctl (v3.4+) from https://github.com/etcd-io/etcd/releases on PATH.';

if (process.getuid?.() !== 0 || !onPath('apt-get')) {
  console.error(`ensure-etcd: ${missing().join(' and ')} not found on PATH.\n${howTo}`);
  process.exit(1);
}

console.error(`ensure-etcd: ${missing().join(' and ')} not found; installing etcd-server and etcd-client with apt-get`);
const env = { ...process.env, DEBIAN_FRONTEND: 'noninteractive' };
for (const args of [['update'], ['install', '-y', 'etcd-server', 'etcd-client']]) {
  const { status, error } = spawnSync('apt-get', args, { stdio: 'inherit', env });
  if (status !== 0) {
    console.error(`ensure-etcd: apt-get ${args.join(' ')} failed (${error?.message ?? `exit ${status}`}).\n${howTo}`);
    process.exit(1);
  }
}

if (missing().length > 0) {
  console.error(`ensure-etcd: still missing after install: ${missing().join(', ')}.\n${howTo}`);
  process.exit(1);
}
