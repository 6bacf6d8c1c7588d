// A key namespace (ClientOptions.namespace), as Go's clientv3/namespace package: every key the client
// sends gets the prefix, every key it returns loses it, so that a namespaced client and Go's
// `namespace.NewKV(client.KV, prefix)` on the same prefix see the same keys.
import type * as pb from '../proto/etcd.js';
import { prefixEnd, toBuffer, type Bytes, type KeyValue } from './kv.js';
import { InvalidArgumentError } from './errors.js';

export class Namespace {
  readonly prefix: Buffer;

  constructor(prefix: Bytes) {
    this.prefix = Buffer.from(toBuffer(prefix));
    if (this.prefix.length === 0) throw new InvalidArgumentError('namespace must not be empty; leave the option out for no namespace');
  }

  /** `key` inside the namespace. */
  key(key: Bytes): Buffer {
    return Buffer.concat([this.prefix, toBuffer(key)]);
  }

  /**
   * A range [key, end) inside the namespace (Go's prefixInterval): no end stays one key; the end
   * `\0` ("every key from key on") becomes the end of the namespace; any other end gets the prefix.
   */
  interval(key: Bytes, end: Buffer | undefined): { key: Buffer; rangeEnd: Buffer | undefined } {
    const k = this.key(key);
    if (end === undefined || end.length === 0) return { key: k, rangeEnd: undefined };
    if (end.length === 1 && end[0] === 0) return { key: k, rangeEnd: prefixEnd(this.prefix) };
    return { key: k, rangeEnd: this.key(end) };
  }

  /** A key etcd returned, without the prefix (every key a namespaced request returns has it). */
  strip(key: Buffer): Buffer {
    return key.subarray(this.prefix.length);
  }

  /** Strips the prefix from a returned key-value, in place (it is ours: freshly decoded). */
  stripKv(kv: pb.KeyValue | undefined): void {
    if (kv?.key) kv.key = this.strip(kv.key);
  }

  /** Keys of a lease that lie in the namespace, without the prefix (Go's leasePrefix.TimeToLive). */
  ownKeys(keys: Buffer[]): Buffer[] {
    return keys
      .filter((k) => k.length >= this.prefix.length && this.prefix.equals(k.subarray(0, this.prefix.length)))
      .map((k) => this.strip(k));
  }

  rangeRequest(r: pb.RangeRequest): pb.RangeRequest {
    return { ...r, ...this.interval(r.key ?? Buffer.alloc(0), r.rangeEnd) };
  }

  deleteRequest(r: pb.DeleteRangeRequest): pb.DeleteRangeRequest {
    return { ...r, ...this.interval(r.key ?? Buffer.alloc(0), r.rangeEnd) };
  }

  putRequest(r: pb.PutRequest): pb.PutRequest {
    return { ...r, key: this.key(r.key ?? Buffer.alloc(0)) };
  }

  compare(c: pb.Compare): pb.Compare {
    return { ...c, ...this.interval(c.key ?? Buffer.alloc(0), c.rangeEnd) };
  }

  txnRequest(t: pb.TxnRequest): pb.TxnRequest {
    return {
      ...t,
      compare: t.compare?.map((c) => this.compare(c)),
      success: t.success?.map((o) => this.requestOp(o)),
      failure: t.failure?.map((o) => this.requestOp(o)),
    };
  }

  private requestOp(o: pb.RequestOp): pb.RequestOp {
    if (o.requestRange) return { ...o, requestRange: this.rangeRequest(o.requestRange) };
    if (o.requestPut) return { ...o, requestPut: this.putRequest(o.requestPut) };
    if (o.requestDeleteRange) return { ...o, requestDeleteRange: this.deleteRequest(o.requestDeleteRange) };
    if (o.requestTxn) return { ...o, requestTxn: this.txnRequest(o.requestTxn) };
    return o;
  }

  /** Strips the prefix from every key in a Txn's responses, in place. */
  txnResponses(responses: pb.ResponseOp[]): pb.ResponseOp[] {
    for (const r of responses) {
      if (r.responseRange) r.responseRange.kvs?.forEach((kv) => this.stripKv(kv));
      if (r.responsePut) this.stripKv(r.responsePut.prevKv);
      if (r.responseDeleteRange) r.responseDeleteRange.prevKvs?.forEach((kv) => this.stripKv(kv));
      if (r.responseTxn) this.txnResponses(r.responseTxn.responses ?? []);
    }
    return responses;
  }

  /** Strips the prefix from every key of a range's answer, in place. */
  kvs(kvs: KeyValue[]): KeyValue[] {
    for (const kv of kvs) kv.key = this.strip(kv.key);
    return kvs;
  }
}
