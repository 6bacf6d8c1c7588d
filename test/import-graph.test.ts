// The house's arrows: the import graph of src/ has no circle, client/ imports nothing above it
// (only what it defines, proto/ and the diagnostics hooks), and the queue engine keeps no state in
// module-level registries (its state is one object per client, src/queue/state.ts).
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
// @ts-expect-error a plain .mjs script without types
import { importGraph } from '../scripts/import-graph.mjs';

const SRC = join(import.meta.dirname, '..', 'src');

type Graph = { cycles: string[][]; upward: string[] };
const graphOf = importGraph as (dir: string) => Graph;

describe('the import graph of src/', () => {
  it('has no circle', () => {
    assert.deepEqual(graphOf(SRC).cycles, []);
  });

  it('client/ imports nothing from queue/, primitives/, metrics/ or the errors above it', () => {
    assert.deepEqual(graphOf(SRC).upward, []);
  });

  it('the walk finds a circle and an upward import where there is one', () => {
    const dir = mkdtempSync(join(tmpdir(), 'import-graph-'));
    try {
      mkdirSync(join(dir, 'client'));
      mkdirSync(join(dir, 'primitives'));
      writeFileSync(
        join(dir, 'client', 'client.ts'),
        "import { Telemetry } from '../metrics/telemetry.js';\nimport type { X } from './x.js';\n",
      );
      writeFileSync(join(dir, 'client', 'x.ts'), 'export type X = 1;\n');
      writeFileSync(join(dir, 'primitives', 'a.ts'), "import type { B } from './b.js';\nexport type A = B;\n");
      writeFileSync(join(dir, 'primitives', 'b.ts'), "import {\n  a,\n} from './a.js';\nexport type B = 1;\n");
      const g = graphOf(dir);
      assert.deepEqual(g.cycles, [['primitives/a.ts', 'primitives/b.ts']]);
      assert.deepEqual(g.upward, ['client/client.ts -> metrics/telemetry.ts']);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('the queue engine', () => {
  it('keeps no state in module-level registries of src/queue (one state object per client)', () => {
    const dir = join(SRC, 'queue');
    const registries = readdirSync(dir).flatMap((f) =>
      readFileSync(join(dir, f), 'utf8')
        .split('\n')
        .filter((line) => /^(export )?(const|let) \w+(: [^=]+)? = new (Weak)?(Map|Set)\b/.test(line))
        .map((line) => `${f}: ${line}`),
    );
    assert.deepEqual(registries, []);
  });
});
