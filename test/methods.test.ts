// The request encoding of src/client/methods.ts, which shares one writer between requests: every
// request's bytes are the generated codec's with a writer of its own, also right after a request
// refused halfway through, and stay as they were while later requests are encoded. Pure, no etcd.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import * as pb from '../src/proto/etcd.js';
import { KV } from '../src/client/methods.js';
import { compare, op } from '../src/client/kv.js';

const key = 'locks/card-8801/694d77a2c0ffee01';
const enqueue: pb.TxnRequest = {
  compare: [compare.createRevision(key, '=', 0n)],
  success: [
    op.put(key, 'host:1', 0x694d_77a2_c0ff_ee01n),
    op.range({ key: Buffer.from('locks/card-8801/'), rangeEnd: Buffer.from('locks/card-88010'), countOnly: true }),
  ],
  failure: [op.get(key)],
};
const release: pb.TxnRequest = { compare: [compare.createRevision(key, '=', 2n ** 40n)], success: [op.delete(key)], failure: [] };
const shared: pb.TxnRequest = { compare: [], success: [enqueue, release, enqueue].map((requestTxn) => ({ requestTxn })), failure: [] };

const alone = (r: pb.TxnRequest): Buffer => Buffer.from(pb.TxnRequest.encode(r).finish());
const sent = (r: pb.TxnRequest): Buffer => Buffer.from(KV.txn.encode(r));

describe('request encoding (one writer for every request)', () => {
  it("gives the generated codec's bytes, request after request, a large one among them", () => {
    const large: pb.TxnRequest = { compare: [], success: [op.put(key, 'x'.repeat(200_000))], failure: [] };
    for (const r of [enqueue, release, shared, large, release, enqueue, {}]) assert.deepEqual(sent(r), alone(r));
  });

  it('starts clean after a request refused halfway through', () => {
    // The put's lease is checked after its key was written: the refusal leaves bytes behind.
    const refused: pb.TxnRequest = { compare: [], success: [{ requestTxn: enqueue }, op.put(key, 'v', 2n ** 63n)], failure: [] };
    assert.throws(() => KV.txn.encode(refused), /too large/);
    assert.deepEqual(sent(release), alone(release));
    assert.deepEqual(sent(shared), alone(shared));
  });

  it('returns bytes that later requests do not overwrite', () => {
    const first = KV.txn.encode(enqueue);
    const copy = Buffer.from(first);
    KV.txn.encode(shared);
    KV.txn.encode(release);
    assert.deepEqual(Buffer.from(first), copy);
  });
});
