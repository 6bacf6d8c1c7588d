// Every TypeScript example in README.md runs here, unchanged except for the endpoints, against a
// real etcd, and type-checks against the published declarations (test/helpers/doc-examples.ts);
// test/guides.test.ts does the same for the guides in docs/.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { runExamples } from './helpers/doc-examples.js';

const examples = runExamples('README', ['README.md'], {
  'README.md': [],
});

test('the README shows a lock, withLock, an election and runAsLeader', () => {
  const all = examples()
    .map((e) => e.code)
    .join('\n');
  for (const api of ['new Mutex(', 'withLock(', 'new Election(', 'runAsLeader(']) assert.ok(all.includes(api), `README shows ${api}`);
});
