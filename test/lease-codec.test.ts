// The hand-written LeaseKeepAlive codec (src/client/lease-codec.ts) against the generated one
// (src/proto): the same bytes out, the same id and TTL back. Pure, no etcd.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { BinaryWriter } from '@bufbuild/protobuf/wire';
import * as pb from '../src/proto/etcd.js';
import { decodeKeepAliveResponse, encodeKeepAliveRequest } from '../src/client/lease-codec.js';

const INT64S = [
  0n,
  1n,
  127n,
  128n,
  300n,
  2n ** 31n - 1n,
  2n ** 31n,
  2n ** 32n - 1n,
  2n ** 32n,
  2n ** 35n + 5n,
  2n ** 53n + 1n,
  0x694d_77a2_c0ff_ee01n,
  2n ** 63n - 1n,
  -1n,
  -300n,
  -(2n ** 32n),
  -(2n ** 63n),
];

const header: pb.ResponseHeader = { clusterId: 2n ** 64n - 3n, memberId: 12345n, revision: 2n ** 40n, raftTerm: 7n };

describe('LeaseKeepAlive codec by hand', () => {
  it('encodes a renewal as the generated codec does', () => {
    for (const ID of INT64S) {
      const want = Buffer.from(pb.LeaseKeepAliveRequest.encode({ ID }).finish());
      assert.deepEqual(Buffer.from(encodeKeepAliveRequest({ ID })), want, `ID ${ID}`);
    }
    assert.equal(encodeKeepAliveRequest({}).length, 0);
  });

  it('refuses an id outside int64', () => {
    assert.throws(() => encodeKeepAliveRequest({ ID: 2n ** 63n }), RangeError);
    assert.throws(() => encodeKeepAliveRequest({ ID: -(2n ** 63n) - 1n }), RangeError);
  });

  it('decodes the id and the TTL of an answer, header and all', () => {
    for (const ID of INT64S) {
      for (const TTL of [0n, 1n, 60n, -1n, 9_000_000_000n, ID]) {
        const bytes = pb.LeaseKeepAliveResponse.encode({ header, ID, TTL }).finish();
        const got = decodeKeepAliveResponse(bytes);
        assert.deepEqual([got.ID, got.TTL], [ID, TTL], `ID ${ID} TTL ${TTL}`);
      }
    }
  });

  it('takes fields in any order, skips unknown ones, and the last of a repeated field wins', () => {
    const w = new BinaryWriter();
    w.uint32(0x18).int64(60n); // TTL first
    w.uint32((9 << 3) | 0).uint64(2n ** 64n - 1n); // unknown varint
    w.uint32((10 << 3) | 1).fixed64(0x1018_1018_1018_1018n); // unknown 64-bit (its bytes would read as fields)
    w.uint32((11 << 3) | 2).bytes(new Uint8Array(200)); // unknown length-delimited, a 2-byte length
    w.uint32((12 << 3) | 5).fixed32(0x1018_1018); // unknown 32-bit (likewise)
    w.uint32(0x10).int64(1n); // ID
    w.uint32(0x0a).bytes(pb.ResponseHeader.encode(header).finish()); // header after the fields
    w.uint32(0x10).int64(0x694d_77a2_c0ff_ee01n); // ID again: the last wins
    const bytes = w.finish();
    const got = decodeKeepAliveResponse(bytes);
    assert.deepEqual([got.ID, got.TTL], [0x694d_77a2_c0ff_ee01n, 60n]);
    const want = pb.LeaseKeepAliveResponse.decode(bytes);
    assert.deepEqual([got.ID, got.TTL], [want.ID, want.TTL]);
  });

  it('reads an empty answer as id 0 and TTL 0', () => {
    const got = decodeKeepAliveResponse(new Uint8Array(0));
    assert.deepEqual([got.ID, got.TTL], [0n, 0n]);
  });

  it('throws on a truncated or malformed answer', () => {
    const whole = pb.LeaseKeepAliveResponse.encode({ header, ID: 0x694d_77a2_c0ff_ee01n, TTL: 60n }).finish();
    for (let n = 1; n < whole.length; n++) {
      // Every proper prefix ends inside a field (the header's, the id's or the TTL's) except the
      // ones that end between two fields, which are valid messages with fewer fields.
      const prefix = whole.subarray(0, n);
      let complete: pb.LeaseKeepAliveResponse | undefined;
      try {
        complete = pb.LeaseKeepAliveResponse.decode(prefix);
      } catch {}
      if (complete === undefined) assert.throws(() => decodeKeepAliveResponse(prefix), /truncated/, `prefix of ${n} bytes`);
      else {
        const got = decodeKeepAliveResponse(prefix);
        assert.deepEqual([got.ID, got.TTL], [complete.ID, complete.TTL], `prefix of ${n} bytes`);
      }
    }
    assert.throws(() => decodeKeepAliveResponse(new Uint8Array([0x13])), /wire type 3/);
    assert.throws(() => decodeKeepAliveResponse(new Uint8Array([0x10, ...new Array(10).fill(0xff), 0x01])), /longer than 10 bytes/);
  });
});
