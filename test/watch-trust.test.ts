// Which etcd versions a waiter trusts to deliver every watch event (src/queue/watch-trust.ts): pure.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mayLoseWatchEvents } from '../src/queue/watch-trust.js';

test('etcd 3.4 before 3.4.36 and 3.5 before 3.5.18 may lose a watch event; 3.6 and later, and the fixed patches, do not', () => {
  const judged = Object.fromEntries(
    ['3.3.27', '3.4.23', '3.4.35', '3.4.36', '3.4.45', '3.5.17', '3.5.18', '3.5.30', '3.6.0', '3.6.16', '3.7.3', '4.0.0', 'v3.7', ''].map(
      (v) => [v, mayLoseWatchEvents(v)],
    ),
  );
  assert.deepEqual(judged, {
    '3.3.27': true,
    '3.4.23': true,
    '3.4.35': true,
    '3.4.36': false,
    '3.4.45': false,
    '3.5.17': true,
    '3.5.18': false,
    '3.5.30': false,
    '3.6.0': false,
    '3.6.16': false,
    '3.7.3': false,
    '4.0.0': false,
    'v3.7': true, // not a version etcd reports: not trusted
    '': true,
  });
});
