// Every TypeScript example in README.md runs here, unchanged except for the endpoint, against a
// real etcd. The examples import 'etcd-concurrency' by name: Node resolves the package's own
// "exports" (dist/, built by `npm test`'s pretest), exactly what a user gets.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdir, readFile, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { Client } from '../src/index.js';
import { ETCD_ID_KEY } from '../src/fencing/index.js';
import { startEtcd, type EtcdCluster } from '../src/testing/index.js';
import { postgresForFile, redisForFile } from './db-servers.js';

const run = promisify(execFile);
const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const dir = path.join(root, '.readme-examples');

/**
 * What an example promises to print: a line `console.log('label', expr); // value ...` promises the
 * output line `label value`.
 */
function promised(code: string): string[] {
  return [...code.matchAll(/console\.log\('([^']+)', .*\); \/\/ ([^\s:]+)/g)].map((m) => `${m[1]} ${m[2]}`);
}

function examples(markdown: string): string[] {
  const out: string[] = [];
  const re = /```ts\n([\s\S]*?)```/g;
  for (let m = re.exec(markdown); m; m = re.exec(markdown)) out.push(m[1]!);
  return out;
}

let etcd: EtcdCluster;
let blocks: string[];
// The fencing examples run against a real PostgreSQL and Redis (skipped without them, failing under CI).
const postgres = postgresForFile();
const redis = redisForFile();

before(async () => {
  etcd = await startEtcd({ members: 1 });
  blocks = examples(await readFile(path.join(root, 'README.md'), 'utf8'));
  await mkdir(dir, { recursive: true });
});

after(async () => {
  await rm(dir, { recursive: true, force: true });
  await etcd?.stop();
});

test('README has examples for Mutex, withLock, Election, runAsLeader, the recipes and testing', () => {
  const all = blocks.join('\n');
  for (const api of [
    'new Mutex(',
    'withLock(',
    'new Election(',
    'runAsLeader(',
    'startEtcd(',
    'new Semaphore(',
    'new RWMutex(',
    'lockAll(',
    'withLocks(',
    'new Barrier(',
    'new DoubleBarrier(',
    'new PostgresFence(',
    'new RedisFence(',
  ]) {
    assert.ok(all.includes(api), `README shows ${api}`);
  }
});

test('every README example runs against a real etcd and leaves nothing behind', async (t) => {
  const files: string[] = [];
  for (const [i, code] of blocks.entries()) {
    const file = path.join(dir, `example-${i}.mts`);
    await writeFile(
      file,
      code
        .replaceAll("'127.0.0.1:2379'", `'${etcd.endpoints[0]}'`)
        .replaceAll("'postgres://postgres@127.0.0.1:5432/postgres'", `'${postgres.server?.connectionString}'`)
        .replaceAll("'redis://127.0.0.1:6379'", `'${redis.server?.url}'`),
    );
    files.push(file);
  }
  await t.test('they type-check against the published declarations', async () => {
    await run(
      process.execPath,
      [
        path.join(root, 'node_modules/typescript/bin/tsc'),
        '--noEmit',
        '--strict',
        '--module',
        'nodenext',
        '--moduleResolution',
        'nodenext',
        '--target',
        'es2022',
        '--lib',
        'es2023,esnext.disposable',
        '--types',
        'node',
        '--skipLibCheck',
        ...files,
      ],
      { cwd: root },
    );
  });
  for (const [i, file] of files.entries()) {
    await t.test(`example ${i + 1} exits 0`, async (st) => {
      if (blocks[i]!.includes("from 'pg'") && !postgres.need(st)) return;
      if (blocks[i]!.includes("from 'ioredis'") && !redis.need(st)) return;
      const { stdout } = await run(process.execPath, ['--import', 'tsx', file], { cwd: root, timeout: 60_000 });
      if (blocks[i]!.includes('console.log(')) assert.notEqual(stdout, '', 'the example printed something');
      const lines = stdout.split('\n');
      for (const line of promised(blocks[i]!))
        assert.ok(lines.includes(line), `the example printed "${line}", as the README says:\n${stdout}`);
    });
  }
  await t.test('the README promises outputs that these runs check', () => {
    assert.deepEqual(blocks.flatMap(promised).sort(), ['healthz 200', 'third gets a permit now? false', 'writer now? false']);
  });
  const client = new Client({ endpoints: etcd.endpoints });
  try {
    const left = await client.getPrefix('');
    // The fencing examples' etcd id stays, as it must (see "When etcd is replaced").
    const keys = left.kvs.map((kv) => kv.key.toString()).filter((k) => !k.startsWith('ledger/') && k !== ETCD_ID_KEY);
    assert.deepEqual(keys, [], 'no lock or election keys left');
    assert.deepEqual(await client.leaseLeases(), [], 'no leases left');
  } finally {
    await client.close();
  }
});
