// Renders bench runs side by side, one column per etcd version, from `npm run bench -- --json`
// files (each a run, or a list of runs from `--etcd 3.4,3.7`):
//
//   ETCD_VERSION=3.4 npm run bench -- --only contended,election --json /tmp/b34.json
//   ETCD_VERSION=3.7 npm run bench -- --only contended,election --json /tmp/b37.json
//   node --import tsx bench/compare.ts /tmp/b34.json /tmp/b37.json [--markdown out.md] [--charts docs]
//
// Runs made separately did not share the machine's load the way one `--etcd 3.4,3.7` run does:
// compare their ratios (ours to Go, to the floor), not their absolute figures.
import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { contendedSvg, electionSvg } from './charts.js';
import { renderVersionsMarkdown, renderVersionsText } from './report-versions.js';
import type { Results } from './results.js';

const { values, positionals } = parseArgs({
  options: { markdown: { type: 'string' }, charts: { type: 'string' } },
  allowPositionals: true,
  strict: true,
});
if (positionals.length === 0) {
  process.stderr.write('usage: bench/compare.ts RUN.json [RUN.json ...] [--markdown FILE] [--charts DIR]\n');
  process.exit(2);
}
const runs: Results[] = [];
for (const f of positionals) {
  const j = JSON.parse(await readFile(f, 'utf8')) as Results | Results[];
  runs.push(...(Array.isArray(j) ? j : [j]));
}
process.stdout.write(`${renderVersionsText(runs)}\n`);
if (values.markdown) await writeFile(values.markdown, renderVersionsMarkdown(runs));
if (values.charts) {
  const c = contendedSvg(runs);
  const e = electionSvg(runs);
  if (c) await writeFile(join(values.charts, 'bench-contended.svg'), c);
  if (e) await writeFile(join(values.charts, 'bench-election.svg'), e);
}
