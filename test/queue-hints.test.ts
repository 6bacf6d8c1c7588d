// QueueHints is pure: the newest count by revision decides, whatever order the answers arrive in.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { QueueHints, SHORT_QUEUE } from '../src/queue/hints.js';

const prefix = Buffer.from('lock/');

test('a count answered late but made at an older revision does not replace a newer one', () => {
  const h = new QueueHints();
  assert.equal(h.short(prefix) || h.long(prefix), false, 'nothing counted yet: neither short nor long');
  h.note(prefix, SHORT_QUEUE + 9n, 150n); // the 41st enqueue's answer arrives first
  h.note(prefix, 2n, 110n); // the 2nd enqueue's answer arrives last
  assert.equal(h.long(prefix), true, 'the count at revision 150 stands');
  h.note(prefix, 1n, 160n);
  assert.equal(h.short(prefix), true, 'a newer count replaces it: the queue drained');
});
