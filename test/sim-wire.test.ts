// The simulator hands the library its answers as the client's decoder would give them
// (src/testing/sim/wire.ts): for the message types it copies field by field, the copy must equal
// the encoder-and-decoder round trip, for answers with fields left out, bytes given as a plain
// Uint8Array, fields no decoder knows, and every kind of nested answer.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as pb from '../src/proto/etcd.js';
import { Rng } from '../src/testing/sim/rng.js';
import { asDecoded, COPIED, roundTrip } from '../src/testing/sim/wire.js';

/** A random answer of each copied type: each field present or not, now and then an unknown one. */
class Answers {
  constructor(private readonly rng: Rng) {}

  private some<T>(fields: Record<string, () => T>): Record<string, T> {
    const out: Record<string, T> = {};
    for (const [k, make] of Object.entries(fields)) if (this.rng.chance(0.7)) out[k] = make();
    if (this.rng.chance(0.1)) out.unknownToTheDecoder = fields[Object.keys(fields)[0]!]!();
    return out;
  }

  private int = (): bigint => [0n, 1n, 7n, 2n ** 62n][this.rng.int(4)]!;
  private bytes = (): Uint8Array | Buffer => {
    const b = Buffer.from(['', 'k', 'key/ä'][this.rng.int(3)]!, 'latin1');
    return this.rng.chance(0.5) ? b : new Uint8Array(b);
  };
  private list = <T>(make: () => T): T[] => Array.from({ length: this.rng.int(3) }, make);

  header = () => this.some({ clusterId: this.int, memberId: this.int, revision: this.int, raftTerm: this.int });
  kv = () =>
    this.some<unknown>({
      key: this.bytes,
      createRevision: this.int,
      modRevision: this.int,
      version: this.int,
      value: this.bytes,
      lease: this.int,
    });
  range = () =>
    this.some<unknown>({ header: this.header, kvs: () => this.list(this.kv), more: () => this.rng.chance(0.5), count: this.int });
  put = () => this.some<unknown>({ header: this.header, prevKv: this.kv });
  deleteRange = () => this.some<unknown>({ header: this.header, deleted: this.int, prevKvs: () => this.list(this.kv) });
  txn = (depth = 0): Record<string, unknown> =>
    this.some<unknown>({
      header: this.header,
      succeeded: () => this.rng.chance(0.5),
      responses: () =>
        this.list(() => {
          const which = this.rng.int(depth < 2 ? 5 : 4);
          if (which === 0) return { responseRange: this.range() };
          if (which === 1) return { responsePut: this.put() };
          if (which === 2) return { responseDeleteRange: this.deleteRange() };
          if (which === 3) return {};
          return { responseTxn: this.txn(depth + 1) };
        }),
    });
  event = () => this.some<unknown>({ type: () => this.rng.int(2), kv: this.kv, prevKv: this.kv });
  watch = () =>
    this.some<unknown>({
      header: this.header,
      watchId: this.int,
      created: () => this.rng.chance(0.5),
      canceled: () => this.rng.chance(0.5),
      compactRevision: this.int,
      cancelReason: () => (this.rng.chance(0.5) ? '' : 'etcdserver: mvcc: required revision has been compacted'),
      fragment: () => this.rng.chance(0.5),
      events: () => this.list(this.event),
    });
  keepAlive = () => this.some<unknown>({ header: this.header, ID: this.int, TTL: this.int });
  leaseGrant = () => this.some<unknown>({ header: this.header, ID: this.int, TTL: this.int, error: () => 'x' });
  leaseRevoke = () => this.some<unknown>({ header: this.header });
  status = () =>
    this.some<unknown>({
      header: this.header,
      version: () => ['', '3.7.3'][this.rng.int(2)]!,
      dbSize: this.int,
      leader: this.int,
      raftIndex: this.int,
      raftTerm: this.int,
      raftAppliedIndex: this.int,
      errors: () => this.list(() => 'etcdserver: no space'),
      dbSizeInUse: this.int,
      isLearner: () => this.rng.chance(0.5),
    });
}

test('each answer the simulator copies equals what the encoder and decoder make of it', () => {
  const a = new Answers(new Rng(1, 'wire'));
  const makers = new Map<pb.MessageFns<unknown>, () => unknown>([
    [pb.RangeResponse, a.range],
    [pb.PutResponse, a.put],
    [pb.DeleteRangeResponse, a.deleteRange],
    [pb.TxnResponse, () => a.txn()],
    [pb.WatchResponse, a.watch],
    [pb.LeaseKeepAliveResponse, a.keepAlive],
    [pb.LeaseGrantResponse, a.leaseGrant],
    [pb.LeaseRevokeResponse, a.leaseRevoke],
    [pb.StatusResponse, a.status],
  ]);
  assert.deepEqual(new Set(makers.keys()), new Set(COPIED), 'every copied type is tried');
  for (const [fns, make] of makers) {
    for (let i = 0; i < 300; i++) {
      const message = make();
      const copy = asDecoded(fns, message);
      assert.deepStrictEqual(
        copy,
        roundTrip(fns, message),
        JSON.stringify(message, (_, v) => (typeof v === 'bigint' ? `${v}n` : v)),
      );
    }
  }
});

test('a copied answer shares no bytes with what the member built', () => {
  const value = Buffer.from('v');
  const copy = asDecoded<pb.RangeResponse>(pb.RangeResponse, { kvs: [{ key: Buffer.from('k'), value }] });
  copy.kvs![0]!.value![0] = 0x77;
  assert.equal(value.toString(), 'v');
});
