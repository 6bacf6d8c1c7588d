// LeaseKeepAlive's two messages, encoded and decoded by hand: a renewal is one int64 field, and of
// its answer only the lease id and the TTL are read (the response header, four more int64s, is
// skipped). The general codec (src/proto) allocated a writer per renewal and six BigInts per answer,
// which weighed more than the rest of a renewal's path together.
import type * as pb from '../proto/etcd.js';

/** int64 <-> its two 32-bit halves (little-endian), without intermediate BigInts. */
const halves = new DataView(new ArrayBuffer(8));

/** LeaseKeepAliveRequest { ID = 1 (int64) }: the field is left out when 0 (proto3's default). */
export function encodeKeepAliveRequest(request: pb.LeaseKeepAliveRequest): Uint8Array {
  const id = request.ID ?? 0n;
  if (id === 0n) return new Uint8Array(0);
  if (BigInt.asIntN(64, id) !== id) throw new RangeError(`lease id ${id} is outside int64`);
  halves.setBigInt64(0, id, true);
  let lo = halves.getUint32(0, true);
  let hi = halves.getUint32(4, true);
  const out = Buffer.allocUnsafe(1 + varintLength(lo, hi));
  out[0] = 0x08; // field 1, varint
  let at = 1;
  while (hi !== 0 || lo > 0x7f) {
    out[at++] = (lo & 0x7f) | 0x80;
    lo = ((lo >>> 7) | (hi << 25)) >>> 0;
    hi >>>= 7;
  }
  out[at] = lo;
  return out;
}

function varintLength(lo: number, hi: number): number {
  let n = 1;
  while (hi !== 0 || lo > 0x7f) {
    n++;
    lo = ((lo >>> 7) | (hi << 25)) >>> 0;
    hi >>>= 7;
  }
  return n;
}

/**
 * LeaseKeepAliveResponse { header = 1; ID = 2 (int64); TTL = 3 (int64) }, without its header. Fields
 * in any order, unknown ones skipped by wire type; a truncated or malformed message throws (the
 * stream then fails as with any undecodable answer).
 */
export function decodeKeepAliveResponse(bytes: Uint8Array): pb.LeaseKeepAliveResponse {
  const r = { bytes, at: 0 };
  let id = 0n;
  let ttl = 0n;
  while (r.at < bytes.length) {
    const tag = readVarint32(r);
    const wire = tag & 7;
    if (tag === 0x10) id = readInt64(r);
    else if (tag === 0x18) ttl = readInt64(r);
    else skip(r, wire);
  }
  return { ID: id, TTL: ttl };
}

interface Reader {
  readonly bytes: Uint8Array;
  at: number;
}

function byte(r: Reader): number {
  if (r.at >= r.bytes.length) throw new Error('LeaseKeepAliveResponse: truncated message');
  return r.bytes[r.at++]!;
}

/** A varint of which only the low 32 bits matter (tags, lengths). */
function readVarint32(r: Reader): number {
  let value = 0;
  for (let shift = 0; shift < 70; shift += 7) {
    const b = byte(r);
    if (shift < 32) value |= (b & 0x7f) << shift;
    if (b < 0x80) return value >>> 0;
  }
  throw new Error('LeaseKeepAliveResponse: varint longer than 10 bytes');
}

function readInt64(r: Reader): bigint {
  let lo = 0;
  let hi = 0;
  for (let i = 0; i < 10; i++) {
    const b = byte(r);
    const bits = b & 0x7f;
    if (i < 4) lo |= bits << (7 * i);
    else if (i === 4) {
      lo |= bits << 28; // its low 4 bits; the high 3 go to hi
      hi |= bits >>> 4;
    } else hi |= bits << (7 * i - 32);
    if (b < 0x80) {
      lo >>>= 0;
      hi >>>= 0;
      // Below 2^32 (a TTL) no DataView round trip is needed.
      if (hi === 0) return BigInt(lo);
      halves.setUint32(0, lo, true);
      halves.setUint32(4, hi, true);
      return halves.getBigInt64(0, true);
    }
  }
  throw new Error('LeaseKeepAliveResponse: varint longer than 10 bytes');
}

function skip(r: Reader, wire: number): void {
  switch (wire) {
    case 0:
      while (byte(r) >= 0x80);
      return;
    case 1:
      return advance(r, 8);
    case 2:
      return advance(r, readVarint32(r));
    case 5:
      return advance(r, 4);
    default:
      throw new Error(`LeaseKeepAliveResponse: unexpected wire type ${wire}`);
  }
}

function advance(r: Reader, n: number): void {
  if (r.at + n > r.bytes.length) throw new Error('LeaseKeepAliveResponse: truncated message');
  r.at += n;
}
