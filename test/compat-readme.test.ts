// The README's TypeScript setup, without the network: the tsconfig box carries what TypeScript 6
// and 7 need, which TypeScript 5 never asked for, so that a newcomer who gets today's `latest` is
// not met by a hundred errors. The compilers themselves run in CI (scripts/compat/typescript.mjs
// installs 5, 6 and 7 from the registry and compiles the box and the quick start with each).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import path from 'node:path';
// @ts-expect-error a plain .mjs script without types
import * as readmeModule from '../scripts/compat/readme.mjs';
// @ts-expect-error a plain .mjs script without types
import * as typescriptModule from '../scripts/compat/typescript.mjs';

type Tsconfig = { compilerOptions: Record<string, unknown>; include?: string[] };
const { layout, quickStart, setupTsconfig } = readmeModule as {
  setupTsconfig(markdown: string): { text: string; json: Tsconfig };
  quickStart(markdown: string): string;
  layout(tsconfig: Tsconfig): { rootDir: string; outDir: string };
};
const { MAJORS, typescriptReleases } = typescriptModule as {
  MAJORS: number[];
  typescriptReleases(registry: { versions: string[]; 'dist-tags': { latest: string } }, majors?: number[]): string[];
};

const readme = readFileSync(path.join(import.meta.dirname, '..', 'README.md'), 'utf8');

test("the README's tsconfig box carries what TypeScript 6 and 7 need", () => {
  const { json } = setupTsconfig(readme);
  const o = json.compilerOptions;
  // TypeScript >= 6 loads @types/node only when `types` names it: else TS2304 'AbortSignal',
  // 'console', and TS2591 'Buffer' in our own .d.ts.
  assert.ok(Array.isArray(o.types) && o.types.includes('node'), `"types" must name "node": ${JSON.stringify(o.types)}`);
  // TypeScript >= 6 stops on TS5011 without rootDir when the sources sit in a subdirectory.
  assert.equal(typeof o.rootDir, 'string', '"rootDir" must be set (TS5011)');
  assert.deepEqual(json.include, [o.rootDir], '"include" is the rootDir, so no file outside it stops tsc (TS6059)');
  // Other packages' own types fail to check (ioredis 6's, under strict).
  assert.equal(o.skipLibCheck, true, '"skipLibCheck": true');
  // The rest of the box as the README explains it: ES modules, strict, `await using` lowered for Node 20.
  assert.equal(o.module, 'nodenext');
  assert.equal(o.strict, true);
  assert.equal(o.target, 'es2022');
});

test('the README says where the quick start goes and how it runs', () => {
  const { json } = setupTsconfig(readme);
  const { rootDir, outDir } = layout(json);
  assert.match(quickStart(readme), /from 'etcd-concurrency'/);
  assert.ok(readme.includes(`\`${rootDir}/main.ts\``), `the README names ${rootDir}/main.ts`);
  assert.ok(readme.includes(`node ${outDir}/main.js`), `the README runs ${outDir}/main.js`);
});

test('each TypeScript major is checked at its newest stable release, and so is the major of `latest`', () => {
  const registry = {
    versions: ['4.9.5', '5.0.4', '5.9.2', '5.9.3', '5.10.0-beta', '6.0.3', '6.1.0-rc', '7.0.2', '7.1.0-dev.1', '8.0.0'],
    'dist-tags': { latest: '8.0.0' },
  };
  assert.deepEqual(MAJORS, [5, 6, 7]);
  assert.deepEqual(typescriptReleases(registry), ['5.9.3', '6.0.3', '7.0.2', '8.0.0']);
  assert.deepEqual(typescriptReleases({ ...registry, 'dist-tags': { latest: '7.0.2' } }, [6]), ['6.0.3', '7.0.2']);
  assert.throws(() => typescriptReleases(registry, [9]), /typescript 9\.x: the registry has no stable release/);
});
