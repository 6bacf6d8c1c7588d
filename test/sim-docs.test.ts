// Every TypeScript example in docs/simulation.md runs here, unchanged. It imports
// 'etcd-concurrency' and 'etcd-concurrency/testing' by name: Node resolves the package's own
// "exports" (dist/, built by `npm test`'s pretest), exactly what a user gets. No etcd: the examples
// run on the simulator.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdir, readFile, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

const run = promisify(execFile);
const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const dir = path.join(root, '.sim-examples');

test('the examples of docs/simulation.md run and print what they promise', async () => {
  const markdown = await readFile(path.join(root, 'docs/simulation.md'), 'utf8');
  const blocks = [...markdown.matchAll(/```ts\n([\s\S]*?)```/g)].map((m) => m[1]!);
  assert.ok(blocks.length > 0, 'docs/simulation.md has a TypeScript example');
  await mkdir(dir, { recursive: true });
  try {
    for (const [i, code] of blocks.entries()) {
      const file = path.join(dir, `example-${i}.ts`);
      await writeFile(file, code);
      const { stdout } = await run(process.execPath, ['--import', 'tsx', file], { cwd: root, timeout: 120_000 });
      // `console.log('label', expr); // value ...` promises the line `label value ...`.
      for (const m of code.matchAll(/console\.log\('([^']+)', .*\); \/\/ (.+)$/gm)) {
        assert.ok(stdout.split('\n').includes(`${m[1]} ${m[2]}`), `example ${i} should print "${m[1]} ${m[2]}", printed:\n${stdout}`);
      }
    }
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});
