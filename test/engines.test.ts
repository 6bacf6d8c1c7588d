// `engines` says exactly the Node versions where `require('etcd-concurrency')` works: the
// package is ESM, and Node loads ESM through require() by default from 20.19 on the
// 20 line and from 22.12 on the 22 line (21 and 22.0-22.11 need a flag). Checked with npm's own
// semver, the one that reads `engines` when a user installs the package.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const pkg = JSON.parse(readFileSync(path.join(root, 'package.json'), 'utf8')) as { engines: { node: string } };
// npm ships with Node: its semver is the one that checks `engines` on install.
const npmDir = path.join(path.dirname(process.execPath), '../lib/node_modules/npm');
const semver = createRequire(path.join(npmDir, 'package.json'))('semver') as { satisfies(v: string, range: string): boolean };

/** Node versions and whether they require() ES modules without a flag. */
const REQUIRE_ESM: [string, boolean][] = [
  ['20.0.0', false],
  ['20.18.3', false],
  ['20.19.0', true],
  ['20.20.2', true],
  ['21.7.3', false],
  ['22.0.0', false],
  ['22.11.0', false],
  ['22.12.0', true],
  ['23.0.0', true],
  ['24.0.0', true],
];

test('engines.node admits exactly the Node versions that can require() the package', () => {
  for (const [version, canRequire] of REQUIRE_ESM) {
    assert.equal(semver.satisfies(version, pkg.engines.node), canRequire, `Node ${version} against engines "${pkg.engines.node}"`);
  }
});

test('this Node satisfies engines.node', () => {
  assert.ok(semver.satisfies(process.versions.node, pkg.engines.node), process.versions.node);
});
