// The TypeScript examples of the README and the guides (docs/*.md), run as a user runs them: each
// ```ts block is written out unchanged except for the endpoints, type-checked against the
// published declarations with the README's compiler options, and run with tsx against a real etcd
// (and PostgreSQL and Redis for the fencing examples). The examples import 'etcd-concurrency' by
// name: Node resolves the package's own "exports" (dist/, built by `npm test`'s pretest), exactly
// what a user gets. test/readme.test.ts runs the README's, test/guides.test.ts the guides'.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdir, readFile, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { ETCD_ID_KEY } from '../../src/fencing/index.js';
import { Client } from '../../src/index.js';
import { startEtcd, type EtcdCluster } from '../../src/testing/index.js';
import { postgresForFile, redisForFile } from '../db-servers.js';

const run = promisify(execFile);
export const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');

/** One ```ts block of a markdown file: its code and the line its fence opens on (1-based). */
export interface Example {
  readonly file: string;
  readonly line: number;
  readonly code: string;
}

/** Every ```ts block of `markdown`, in order. */
export function examples(file: string, markdown: string): Example[] {
  const out: Example[] = [];
  const re = /^```ts\n([\s\S]*?)^```$/gm;
  for (let m = re.exec(markdown); m; m = re.exec(markdown)) {
    out.push({ file, line: markdown.slice(0, m.index).split('\n').length, code: m[1]! });
  }
  return out;
}

/**
 * What an example promises to print: a line `console.log('label', expr); // value ...` promises the
 * output line `label value`.
 */
export function promised(code: string): string[] {
  return [...code.matchAll(/console\.log\('([^']+)', .*\); \/\/ ([^\s:]+)/g)].map((m) => `${m[1]} ${m[2]}`);
}

/**
 * Registers the tests of `files` (paths relative to the repository), written out under
 * `.readme-examples/<label>/`: all their examples type-check, and then one test per file, in which
 * every example runs (exit 0, printing what it promises), and after which the shared etcd holds no
 * lock or election key and no lease (whatever a failing example left is then removed, so that the
 * next file is judged on its own). `promises` is what each file's examples promise to print, in
 * order: a promise that a run cannot check (or one the test does not expect) fails too. Returns the
 * examples, read before the tests run.
 */
export function runExamples(
  label: string,
  files: readonly string[],
  promises: Readonly<Record<string, readonly string[]>>,
): () => Example[] {
  let etcd: EtcdCluster;
  const all: Example[] = [];
  const dir = path.join(root, '.readme-examples', label);
  // The fencing examples run against a real PostgreSQL and Redis (skipped without them, failing under CI).
  const postgres = postgresForFile();
  const redis = redisForFile();

  before(async () => {
    etcd = await startEtcd({ members: 1 });
    for (const f of files) all.push(...examples(f, await readFile(path.join(root, f), 'utf8')));
    await rm(dir, { recursive: true, force: true });
    await mkdir(dir, { recursive: true });
  });

  after(async () => {
    await rm(dir, { recursive: true, force: true });
    await etcd?.stop();
  });

  const source = (e: Example): string =>
    e.code
      .replaceAll("'127.0.0.1:2379'", `'${etcd.endpoints[0]}'`)
      .replaceAll("'postgres://postgres@127.0.0.1:5432/postgres'", `'${postgres.server?.connectionString}'`)
      .replaceAll("'redis://127.0.0.1:6379'", `'${redis.server?.url}'`);
  const fileOf = (e: Example): string => path.join(dir, `${e.file.replace(/\W+/g, '-')}-line-${e.line}.mts`);
  const where = (e: Example): string => `${e.file}:${e.line}`;

  test('the examples type-check against the published declarations', async () => {
    assert.ok(all.length > 0, `no \`\`\`ts example in ${files.join(', ')}`);
    for (const e of all) await writeFile(fileOf(e), source(e));
    try {
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
          ...all.map(fileOf),
        ],
        { cwd: root },
      );
    } catch (err) {
      const e = err as { stdout?: string };
      // tsc names the written file: say which example it is.
      let out = e.stdout ?? String(err);
      for (const ex of all) out = out.replaceAll(path.relative(root, fileOf(ex)), `${where(ex)} (${path.relative(root, fileOf(ex))})`);
      assert.fail(`tsc:\n${out}`);
    }
  });

  for (const file of files) {
    test(`every example of ${file} runs against a real etcd and leaves nothing behind`, async (t) => {
      const mine = all.filter((e) => e.file === file);
      for (const e of mine) {
        await t.test(`the example at line ${e.line} exits 0`, async (st) => {
          if (e.code.includes("from 'pg'") && !postgres.need(st)) return;
          if (e.code.includes("from 'ioredis'") && !redis.need(st)) return;
          await writeFile(fileOf(e), source(e));
          const { stdout } = await run(process.execPath, ['--import', 'tsx', fileOf(e)], { cwd: root, timeout: 60_000 }).catch(
            (err: { stdout?: string; stderr?: string; message?: string }) =>
              assert.fail(`${where(e)} failed: ${err.message}\n${err.stdout ?? ''}${err.stderr ?? ''}`),
          );
          if (e.code.includes('console.log(')) assert.notEqual(stdout, '', `${where(e)} printed something`);
          const lines = stdout.split('\n');
          for (const line of promised(e.code)) assert.ok(lines.includes(line), `${where(e)} printed "${line}", as it says:\n${stdout}`);
        });
      }
      await t.test('it promises the outputs these runs check', () => {
        assert.deepEqual(
          mine.flatMap((e) => promised(e.code)),
          promises[file] ?? [],
        );
      });
      const client = new Client({ endpoints: etcd.endpoints });
      try {
        const left = await client.getPrefix('');
        // The fencing examples' etcd id stays, as it must (docs/fencing.md, "When etcd is replaced").
        const keys = left.kvs.map((kv) => kv.key.toString()).filter((k) => !k.startsWith('ledger/') && k !== ETCD_ID_KEY);
        assert.deepEqual(keys, [], `${file}: no lock or election keys left`);
        assert.deepEqual(await client.leaseLeases(), [], `${file}: no leases left`);
      } finally {
        await client.delete('', { prefix: true }).catch(() => {});
        for (const id of await client.leaseLeases().catch(() => [])) await client.leaseRevoke(id).catch(() => {});
        await client.close();
      }
    });
  }

  return () => all;
}
