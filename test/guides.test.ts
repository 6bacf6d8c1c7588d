// The guides in docs/ as a user meets them: every ```ts example of docs/*.md runs against a real
// etcd and type-checks against the published declarations (as the README's do, test/readme.test.ts),
// every relative link of the README, CONTRIBUTING.md and docs/ leads to a file and a heading that
// exist, each guide shows the API it is named for, and the package ships the guides but not the lab
// notes (docs/lab/).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';
import { root, runExamples } from './helpers/doc-examples.js';

const run = promisify(execFile);

/** The guides: docs/*.md (docs/lab/ holds lab notes, not shipped, without examples). */
const guides = readdirSync(path.join(root, 'docs'))
  .filter((f) => f.endsWith('.md'))
  .sort()
  .map((f) => `docs/${f}`);

const examples = runExamples('docs', guides, {
  'docs/locks.md': ['free for another session? false'],
  'docs/operating.md': ['healthz 200'],
  'docs/rwmutex.md': ['writer now? false'],
  'docs/semaphore.md': ['third gets a permit now? false'],
  'docs/testing.md': ['lost lease_expired'],
  'docs/simulation.md': ['order b,a'],
});

/** Each guide shows the API it is named for in a ```ts example. */
const shows: Record<string, string[]> = {
  'docs/locks.md': ['new Mutex(', 'tryLock(', 'withLock(', 'lockAll(', 'withLocks('],
  'docs/election.md': ['new Election(', 'observe(', 'DIAGNOSTICS_CHANNEL.leaderRetry'],
  'docs/semaphore.md': ['new Semaphore('],
  'docs/rwmutex.md': ['new RWMutex('],
  'docs/barriers.md': ['new Barrier(', 'new DoubleBarrier('],
  'docs/fencing.md': ['new PostgresFence(', 'new RedisFence('],
  'docs/operating.md': ['leaderHealth(', 'healthHandler(', 'meterProvider', 'diagnosticsChannel.subscribe('],
  'docs/testing.md': ['startEtcd(', 'startProxy('],
};

test('each guide shows the API it is named for', () => {
  for (const [file, apis] of Object.entries(shows)) {
    const code = examples()
      .filter((e) => e.file === file)
      .map((e) => e.code)
      .join('\n');
    for (const api of apis) assert.ok(code.includes(api), `${file} has an example with ${api}`);
  }
});

/** Every markdown file of the repository a reader follows links through. */
function markdownFiles(): string[] {
  const out = ['README.md', 'CONTRIBUTING.md'].filter((f) => existsSync(path.join(root, f)));
  const walk = (dir: string): void => {
    for (const d of readdirSync(path.join(root, dir), { withFileTypes: true })) {
      const rel = `${dir}/${d.name}`;
      if (d.isDirectory() && d.name !== 'api') walk(rel);
      else if (d.name.endsWith('.md')) out.push(rel);
    }
  };
  walk('docs');
  return out;
}

/** The text outside fenced code blocks and inline code, where links and headings are. */
function prose(markdown: string): string {
  return markdown.replace(/^```[\s\S]*?^```$/gm, '').replace(/`[^`\n]*`/g, '``');
}

/**
 * The anchors of a file's headings that both GitHub and TypeDoc (the reference renders the guides,
 * typedoc.json's projectDocuments) make alike: the rendered text, lower case, punctuation dropped,
 * spaces as hyphens. TypeDoc leaves out inline code, GitHub keeps its text: a heading with inline
 * code is linked to by neither, so that no link works on one and fails on the other.
 */
function anchors(markdown: string): Set<string> {
  const out = new Set<string>();
  const seen = new Map<string, number>();
  const withoutCode = markdown.replace(/^```[\s\S]*?^```$/gm, '');
  for (const m of withoutCode.matchAll(/^#{1,6} +(.+?) *#*$/gm)) {
    const text = m[1]!.replace(/!?\[([^\]]*)\]\([^)]*\)/g, '$1');
    if (text.includes('`')) continue;
    const slug = text
      .toLowerCase()
      .replace(/[^\p{L}\p{N} _-]/gu, '')
      .replace(/ /g, '-');
    const n = seen.get(slug) ?? 0;
    seen.set(slug, n + 1);
    out.add(n === 0 ? slug : `${slug}-${n}`);
  }
  return out;
}

test('anchors are made as GitHub and TypeDoc make them, and none for a heading with inline code', () => {
  const md =
    '# A b: c, d\n## Prometheus, a health check, and `doctor`\n```sh\n# not a heading\n```\n## Twice\n## Twice\n## [Linked](x.md) text\n';
  assert.deepEqual([...anchors(md)], ['a-b-c-d', 'twice', 'twice-1', 'linked-text']);
});

test('every relative link of the README, CONTRIBUTING.md and docs/ leads to a file, and to a heading there', () => {
  const broken: string[] = [];
  for (const file of markdownFiles()) {
    const text = readFileSync(path.join(root, file), 'utf8');
    for (const m of prose(text).matchAll(/\]\(([^)\s]+)(?: "[^"]*")?\)/g)) {
      const link = m[1]!;
      if (/^[a-z][a-z0-9+.-]*:/i.test(link)) continue; // https:, mailto:
      const [target = '', anchor] = link.split('#');
      const resolved = target === '' ? file : path.posix.normalize(path.posix.join(path.posix.dirname(file), target));
      if (!existsSync(path.join(root, resolved))) {
        broken.push(`${file}: ${link} (no file ${resolved})`);
        continue;
      }
      if (anchor !== undefined && resolved.endsWith('.md') && !anchors(readFileSync(path.join(root, resolved), 'utf8')).has(anchor))
        broken.push(`${file}: ${link} (no heading #${anchor} in ${resolved})`);
    }
  }
  assert.deepEqual(broken, []);
});

test('the package ships the guides and CONTRIBUTING.md, and leaves the lab notes out', async () => {
  const { stdout } = await run('npm', ['pack', '--dry-run', '--json', '--ignore-scripts'], { cwd: root, maxBuffer: 64 * 2 ** 20 });
  const files = (JSON.parse(stdout) as { files: { path: string }[] }[])[0]!.files.map((f) => f.path);
  for (const g of guides) assert.ok(files.includes(g), `${g} is in the package`);
  assert.deepEqual(
    files.filter((f) => f.startsWith('docs/lab/')),
    [],
    'lab notes in the package',
  );
  // The README links it: a link in the README on the registry's page must lead somewhere.
  assert.ok(files.includes('CONTRIBUTING.md'), 'CONTRIBUTING.md is in the package');
});
