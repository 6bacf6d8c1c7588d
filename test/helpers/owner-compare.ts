// The fencing check every holder's handle must pass: ownerCompare() guards writes while held only.
import assert from 'node:assert/strict';
import { type Client, type Compare, op } from '../../src/index.js';

/**
 * Takes a hold, checks that a Txn guarded by its ownerCompare() writes `<prefix>data`; deletes the
 * hold's key and checks that the guard then refuses, even once the same session holds again.
 */
export async function assertOwnerCompareFences<H extends { key: string; ownerCompare(): Compare }>(
  client: Client,
  prefix: string,
  take: () => Promise<H>,
  release: (h: H) => Promise<unknown>,
): Promise<void> {
  const h = await take();
  const fenced = (v: string) => client.txn({ compare: [h.ownerCompare()], success: [op.put(`${prefix}data`, v)], failure: [] });
  assert.equal((await fenced('1')).succeeded, true);
  await client.delete(h.key);
  const again = await take();
  assert.equal((await fenced('2')).succeeded, false);
  assert.equal((await client.get(`${prefix}data`))?.value.toString(), '1');
  await release(again);
}
