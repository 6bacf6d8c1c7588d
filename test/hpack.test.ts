// HPACK (src/client/h2/hpack.ts), with no etcd and no timers:
// - the decoder against the RFC 7541 Appendix C vectors: C.2 (each representation alone), C.3 and
//   C.4 (three requests on one decoder, raw and Huffman), C.5 and C.6 (three responses with a
//   256-byte table, so entries are evicted), checking the dynamic table after each block;
// - every malformed block it must refuse with HpackError (bad indexes, truncation, bad Huffman
//   strings, table size updates out of bounds or out of place), and a size update to 0 emptying
//   the table;
// - the Huffman tree over all 256 byte values;
// - encodeHeaders: its exact bytes for static matches, static names, new names, multi-byte lengths
//   and never-indexed (sensitive) fields, and that its blocks round-trip without touching the
//   decoder's table;
// - interop with nghttp2: a node:http2 server answers three requests sent by hand over a raw
//   socket (HEADERS built by encodeHeaders), and one HpackDecoder follows its Huffman strings and
//   dynamic table (also when we announce a 256 or 0 byte table, which nghttp2 must shrink to).
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import http2 from 'node:http2';
import net, { type AddressInfo } from 'node:net';
import { encodeHeaders, HpackDecoder, HpackError, type HeaderField, type HeaderMap } from '../src/client/h2/hpack.js';
import { HUFFMAN_CODES, HUFFMAN_LENGTHS } from '../src/client/h2/hpack-tables.js';

/** A header block from the RFC's hex dump (spaces and line breaks ignored). */
const hex = (s: string): Buffer => Buffer.from(s.replace(/\s+/g, ''), 'hex');

/** Asserts that decoding `block` throws HpackError, optionally with a message matching `re`. */
function refuses(block: Buffer | number[], re?: RegExp, d = new HpackDecoder()): void {
  assert.throws(
    () => d.decode(Buffer.isBuffer(block) ? block : Buffer.from(block)),
    (e: unknown) => e instanceof HpackError && e.name === 'HpackError' && (re === undefined || re.test(e.message)),
  );
}

/** Asserts a decoded map's entries (whatever its prototype) equal `expected`'s. */
const same = (actual: HeaderMap, expected: HeaderMap, message?: string): void =>
  assert.deepEqual({ ...actual }, expected, message);

/** Huffman-codes `bytes` with the RFC's code (Appendix B), padding with ones. */
function huffman(bytes: Buffer): Buffer {
  let acc = 0n;
  let bits = 0;
  for (const b of bytes) {
    acc = (acc << BigInt(HUFFMAN_LENGTHS[b]!)) | BigInt(HUFFMAN_CODES[b]!);
    bits += HUFFMAN_LENGTHS[b]!;
  }
  const pad = (8 - (bits % 8)) % 8;
  acc = (acc << BigInt(pad)) | ((1n << BigInt(pad)) - 1n);
  bits += pad;
  const out = Buffer.alloc(bits / 8);
  for (let i = out.length - 1; i >= 0; i--, acc >>= 8n) out[i] = Number(acc & 0xffn);
  return out;
}

/** A "literal without indexing, new name" block: name 'x', the value given as a string literal's bytes. */
const literalX = (valueLiteral: number[] | Buffer): Buffer => Buffer.from([0x00, 0x01, 0x78, ...valueLiteral]);

describe('HPACK decoder: RFC 7541 Appendix C', () => {
  it('C.2.1 literal with indexing', () => {
    const d = new HpackDecoder();
    same(d.decode(hex('400a 6375 7374 6f6d 2d6b 6579 0d63 7573 746f 6d2d 6865 6164 6572')), {
      'custom-key': 'custom-header',
    });
    assert.equal(d.length, 1);
    same(d.decode(hex('be')), { 'custom-key': 'custom-header' });
  });

  it('C.2.2 literal without indexing', () => {
    const d = new HpackDecoder();
    same(d.decode(hex('040c 2f73 616d 706c 652f 7061 7468')), { ':path': '/sample/path' });
    assert.equal(d.length, 0);
  });

  it('C.2.3 literal never indexed', () => {
    const d = new HpackDecoder();
    same(d.decode(hex('1008 7061 7373 776f 7264 0673 6563 7265 74')), { password: 'secret' });
    assert.equal(d.length, 0);
  });

  it('C.2.4 indexed', () => {
    const d = new HpackDecoder();
    same(d.decode(hex('82')), { ':method': 'GET' });
    assert.equal(d.length, 0);
  });

  const requests: HeaderMap[] = [
    { ':method': 'GET', ':scheme': 'http', ':path': '/', ':authority': 'www.example.com' },
    { ':method': 'GET', ':scheme': 'http', ':path': '/', ':authority': 'www.example.com', 'cache-control': 'no-cache' },
    {
      ':method': 'GET',
      ':scheme': 'https',
      ':path': '/index.html',
      ':authority': 'www.example.com',
      'custom-key': 'custom-value',
    },
  ];
  /** After the third request the table is, newest first: custom-key, cache-control, :authority. */
  const requestTable = (d: HpackDecoder): void => {
    same(d.decode(hex('be bf c0')), {
      'custom-key': 'custom-value',
      'cache-control': 'no-cache',
      ':authority': 'www.example.com',
    });
    refuses(hex('c1'), /beyond/, d);
  };

  it('C.3 requests without Huffman, one decoder', () => {
    const d = new HpackDecoder();
    const blocks = [
      '8286 8441 0f77 7777 2e65 7861 6d70 6c65 2e63 6f6d',
      '8286 84be 5808 6e6f 2d63 6163 6865',
      '8287 85bf 400a 6375 7374 6f6d 2d6b 6579 0c63 7573 746f 6d2d 7661 6c75 65',
    ];
    blocks.forEach((b, i) => {
      same(d.decode(hex(b)), requests[i]);
      assert.equal(d.length, i + 1);
    });
    requestTable(d);
  });

  it('C.4 requests with Huffman, one decoder', () => {
    const d = new HpackDecoder();
    const blocks = [
      '8286 8441 8cf1 e3c2 e5f2 3a6b a0ab 90f4 ff',
      '8286 84be 5886 a8eb 1064 9cbf',
      '8287 85bf 4088 25a8 49e9 5ba9 7d7f 8925 a849 e95b b8e8 b4bf',
    ];
    blocks.forEach((b, i) => {
      same(d.decode(hex(b)), requests[i]);
      assert.equal(d.length, i + 1);
    });
    requestTable(d);
  });

  const cookie = 'foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600; version=1';
  const responses: HeaderMap[] = [
    {
      ':status': '302',
      'cache-control': 'private',
      date: 'Mon, 21 Oct 2013 20:13:21 GMT',
      location: 'https://www.example.com',
    },
    {
      ':status': '307',
      'cache-control': 'private',
      date: 'Mon, 21 Oct 2013 20:13:21 GMT',
      location: 'https://www.example.com',
    },
    {
      ':status': '200',
      'cache-control': 'private',
      date: 'Mon, 21 Oct 2013 20:13:22 GMT',
      location: 'https://www.example.com',
      'content-encoding': 'gzip',
      'set-cookie': cookie,
    },
  ];
  /** Entries after each response: 4 (222 bytes), 4 (:status 302 evicted), 3 (215 bytes). */
  const responseLengths = [4, 4, 3];
  /** After the third response the table is, newest first: set-cookie, content-encoding, date. */
  const responseTable = (d: HpackDecoder): void => {
    same(d.decode(hex('be bf c0')), {
      'set-cookie': cookie,
      'content-encoding': 'gzip',
      date: 'Mon, 21 Oct 2013 20:13:22 GMT',
    });
    refuses(hex('c1'), /beyond/, d);
  };

  it('C.5 responses without Huffman, 256-byte table with evictions', () => {
    const d = new HpackDecoder(256);
    const blocks = [
      `4803 3330 3258 0770 7269 7661 7465 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133 2032 303a
       3133 3a32 3120 474d 546e 1768 7474 7073 3a2f 2f77 7777 2e65 7861 6d70 6c65 2e63 6f6d`,
      '4803 3330 37c1 c0bf',
      `88c1 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133 2032 303a 3133 3a32 3220 474d 54c0 5a04
       677a 6970 7738 666f 6f3d 4153 444a 4b48 514b 425a 584f 5157 454f 5049 5541 5851 5745 4f49
       553b 206d 6178 2d61 6765 3d33 3630 303b 2076 6572 7369 6f6e 3d31`,
    ];
    blocks.forEach((b, i) => {
      same(d.decode(hex(b)), responses[i]);
      assert.equal(d.length, responseLengths[i]);
    });
    responseTable(d);
  });

  it('C.6 responses with Huffman, 256-byte table with evictions', () => {
    const d = new HpackDecoder(256);
    const blocks = [
      `4882 6402 5885 aec3 771a 4b61 96d0 7abe 9410 54d4 44a8 2005 9504 0b81 66e0 82a6 2d1b ff6e
       919d 29ad 1718 63c7 8f0b 97c8 e9ae 82ae 43d3`,
      '4883 640e ffc1 c0bf',
      `88c1 6196 d07a be94 1054 d444 a820 0595 040b 8166 e084 a62d 1bff c05a 839b d9ab 77ad 94e7
       821d d7f2 e6c7 b335 dfdf cd5b 3960 d5af 2708 7f36 72c1 ab27 0fb5 291f 9587 3160 65c0 03ed
       4ee5 b106 3d50 07`,
    ];
    blocks.forEach((b, i) => {
      same(d.decode(hex(b)), responses[i]);
      assert.equal(d.length, responseLengths[i]);
    });
    responseTable(d);
  });
});

describe('HPACK decoder: malformed blocks throw HpackError', () => {
  it('index 0', () => refuses([0x80], /index 0/));

  it('an index beyond the static and dynamic tables', () => {
    refuses([0xbe], /beyond/); // 62 with an empty dynamic table
    refuses([0xff, 0x80, 0x01], /beyond/); // 127 + 128
    refuses([0x7e, 0x01, 0x61], /beyond/); // literal whose name is index 62
    refuses([0x0f, 0x2f, 0x01, 0x61], /beyond/); // literal without indexing, name index 62
    const d = new HpackDecoder();
    d.decode(hex('4001 61 0162')); // one entry, at 62
    same(d.decode(hex('be')), { a: 'b' });
    refuses([0xbf], /beyond/, d);
  });

  it('a truncated integer', () => {
    refuses([0xff], /truncated integer/); // indexed, 7-bit prefix full, no continuation
    refuses([0xff, 0x80], /truncated integer/); // continuation bit set on the last byte
    refuses([0x3f], /truncated integer/); // size update
    refuses([0x00, 0x7f], /truncated integer/); // name length
  });

  it('an integer too large', () => {
    refuses([0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01], /too large/);
    refuses([0xff, 0x80, 0x80, 0x80, 0x80, 0x08], /too large/); // 127 + 2^31
  });

  it('a truncated string', () => {
    refuses([0x40], /truncated string/); // no name at all
    refuses([0x40, 0x05, 0x61], /truncated string/); // name of 5 bytes, 1 present
    refuses([0x40, 0x01, 0x61], /truncated string/); // no value
    refuses([0x04, 0x03, 0x2f, 0x61], /truncated string/); // value of 3 bytes, 2 present
    refuses([0x04, 0x83, 0x1f], /truncated string/); // Huffman value of 3 bytes, 1 present
  });

  it('a Huffman string containing EOS', () => {
    refuses(literalX([0x84, 0xff, 0xff, 0xff, 0xff]), /EOS/); // 30 ones (EOS), then 2 of padding
    refuses(literalX([0x85, 0x1f, 0xff, 0xff, 0xff, 0xff]), /EOS/); // 'a', then EOS
  });

  it('Huffman padding longer than 7 bits', () => {
    refuses(literalX([0x81, 0xff]), /padding/); // 8 ones
    refuses(literalX([0x82, 0x1f, 0xff]), /padding/); // 'a' (00011), then 11 ones
  });

  it('Huffman padding not all ones', () => {
    refuses(literalX([0x81, 0x18]), /padding/); // 'a', then 000
    refuses(literalX([0x81, 0x1e]), /padding/); // 'a', then 110
    // The same strings padded properly decode.
    same(new HpackDecoder().decode(literalX([0x81, 0x1f])), { x: 'a' });
    same(new HpackDecoder().decode(literalX([0x80])), { x: '' });
  });

  it('a dynamic table size update above the maximum', () => {
    refuses([0x3f, 0xe2, 0x01], /above 256/, new HpackDecoder(256)); // 257
    refuses([0x3f, 0xe2, 0x1f], /above 4096/); // 4097
    refuses([0x21], /above 0/, new HpackDecoder(0));
    // The maximum itself is allowed, and several updates in a row at the start of a block.
    const d = new HpackDecoder(256);
    same(d.decode(Buffer.from([0x20, 0x3f, 0xe1, 0x01, 0x82])), { ':method': 'GET' });
  });

  it('a dynamic table size update after a field', () => {
    refuses([0x82, 0x20], /after a field/);
    refuses(hex('4001 61 0162 3f e1 1f'), /after a field/);
    // A new block may start with one again.
    const d = new HpackDecoder();
    d.decode(Buffer.from([0x82]));
    same(d.decode(Buffer.from([0x20, 0x82])), { ':method': 'GET' });
  });
});

describe('HPACK decoder: table size and headers', () => {
  it('a size update to 0 empties the table, and it stays empty until raised again', () => {
    const d = new HpackDecoder();
    d.decode(hex('8286 8441 0f77 7777 2e65 7861 6d70 6c65 2e63 6f6d')); // C.3.1
    d.decode(hex('8286 84be 5808 6e6f 2d63 6163 6865')); // C.3.2
    assert.equal(d.length, 2);
    same(d.decode(Buffer.from([0x20])), {});
    assert.equal(d.length, 0);
    refuses([0xbe], /beyond/, d);
    // With capacity 0 an indexed literal decodes but is not stored.
    same(d.decode(hex('4001 61 0162')), { a: 'b' });
    assert.equal(d.length, 0);
    refuses([0xbe], /beyond/, d);
    // Back to 4096: entries are stored again.
    same(d.decode(hex('3fe11f 4001 61 0162')), { a: 'b' });
    assert.equal(d.length, 1);
    same(d.decode(hex('be')), { a: 'b' });
  });

  it('a size update below the current size evicts the oldest entries', () => {
    const d = new HpackDecoder();
    d.decode(hex('4001 61 0131 4001 62 0132 4001 63 0133')); // three 34-byte entries, c newest
    assert.equal(d.length, 3);
    d.decode(Buffer.from([0x3f, 0x2c])); // 31 + 44 = 75: room for two
    assert.equal(d.length, 2);
    same(d.decode(hex('be bf')), { c: '3', b: '2' });
    refuses([0xc0], /beyond/, d);
  });

  it('an entry larger than the table empties it and is not added', () => {
    const d = new HpackDecoder(64);
    d.decode(hex('4001 61 0162')); // 34 bytes
    assert.equal(d.length, 1);
    const big = 'v'.repeat(40); // 1 + 40 + 32 = 73 > 64
    same(d.decode(Buffer.from([0x40, 0x01, 0x63, big.length, ...Buffer.from(big)])), { c: big });
    assert.equal(d.length, 0);
  });

  it('repeated names are joined with ", " in order', () => {
    const d = new HpackDecoder();
    const block = Buffer.concat([hex('4001 61 0131'), hex('0001 61 0132'), hex('be'), hex('82')]);
    same(d.decode(block), { a: '1, 2, 1', ':method': 'GET' });
  });

  it(
    'header names that are Object.prototype properties decode like any other',
    () => {
      const out = new HpackDecoder().decode(
        encodeHeaders([
          { name: 'constructor', value: 'x' },
          { name: '__proto__', value: 'y' },
        ]),
      );
      assert.equal(Object.hasOwn(out, 'constructor') ? out['constructor'] : undefined, 'x'); // got 'function Object() { [native code] }, x'
      assert.equal(Object.hasOwn(out, '__proto__') ? out['__proto__'] : undefined, 'y'); // got undefined: the field is dropped
    },
  );

  it('Huffman: every byte value 0-255 decodes, as latin1 characters', () => {
    const all = Buffer.from(Array.from({ length: 256 }, (_, i) => i));
    const coded = huffman(all);
    assert.ok(coded.length > 127 + 128); // a three-byte string length
    const rest = coded.length - 127;
    const lit = [0xff, (rest & 0x7f) | 0x80, rest >> 7, ...coded];
    assert.ok(rest >> 7 < 128);
    same(new HpackDecoder().decode(literalX(lit)), { x: all.toString('latin1') });
    // Each symbol alone, so that every code's padding is exercised.
    for (let b = 0; b < 256; b++) {
      const one = huffman(Buffer.from([b]));
      same(new HpackDecoder().decode(literalX([0x80 | one.length, ...one])), {
        x: String.fromCharCode(b),
      });
    }
  });
});

describe('HPACK encoder', () => {
  const roundTrip = (fields: HeaderField[]): HeaderMap => {
    const d = new HpackDecoder();
    const out = d.decode(encodeHeaders(fields));
    assert.equal(d.length, 0, 'the encoder never indexes');
    return { ...out };
  };

  it('static exact matches are one indexed byte', () => {
    assert.deepEqual(
      encodeHeaders([
        { name: ':method', value: 'POST' },
        { name: ':scheme', value: 'http' },
        { name: ':method', value: 'GET' },
        { name: ':status', value: '200' },
        { name: 'accept-encoding', value: 'gzip, deflate' },
      ]),
      Buffer.from([0x83, 0x86, 0x82, 0x88, 0x90]),
    );
    assert.deepEqual(
      roundTrip([
        { name: ':method', value: 'POST' },
        { name: ':scheme', value: 'http' },
      ]),
      { ':method': 'POST', ':scheme': 'http' },
    );
  });

  it('static names with other values are literals without indexing', () => {
    const path = '/etcdserverpb.KV/Range';
    assert.deepEqual(
      encodeHeaders([{ name: ':path', value: path }]),
      Buffer.concat([Buffer.from([0x04, path.length]), Buffer.from(path)]),
    );
    // Name index 15 fills the 4-bit prefix (a zero continuation byte), 58 needs one more.
    assert.deepEqual(
      encodeHeaders([{ name: 'accept-charset', value: 'x' }]),
      Buffer.from([0x0f, 0x00, 0x01, 0x78]),
    );
    assert.deepEqual(encodeHeaders([{ name: 'user-agent', value: 'x' }]), Buffer.from([0x0f, 58 - 15, 0x01, 0x78]));
    assert.deepEqual(
      roundTrip([
        { name: ':method', value: 'POST' },
        { name: ':path', value: path },
        { name: 'content-type', value: 'application/grpc' },
        { name: 'user-agent', value: 'etcd-concurrency/0.1.0' },
        { name: ':authority', value: '127.0.0.1:2379' },
      ]),
      {
        ':method': 'POST',
        ':path': path,
        'content-type': 'application/grpc',
        'user-agent': 'etcd-concurrency/0.1.0',
        ':authority': '127.0.0.1:2379',
      },
    );
  });

  it('new names are literal names without indexing', () => {
    assert.deepEqual(
      encodeHeaders([{ name: 'te', value: 'trailers' }]),
      Buffer.concat([Buffer.from([0x00, 0x02]), Buffer.from('te'), Buffer.from([0x08]), Buffer.from('trailers')]),
    );
    assert.deepEqual(
      roundTrip([
        { name: 'te', value: 'trailers' },
        { name: 'grpc-timeout', value: '1999m' },
        { name: 'x-empty', value: '' },
      ]),
      { te: 'trailers', 'grpc-timeout': '1999m', 'x-empty': '' },
    );
  });

  it('long values take multi-byte length integers', () => {
    for (const [len, prefix] of [
      [126, [0x7e]],
      [127, [0x7f, 0x00]],
      [128, [0x7f, 0x01]],
      [200, [0x7f, 0x49]],
      [255, [0x7f, 0x80, 0x01]],
      [20_000, [0x7f, 0xa1, 0x9b, 0x01]],
    ] as const) {
      const value = 'abcdefghij'.repeat(Math.ceil(len / 10)).slice(0, len);
      const block = encodeHeaders([{ name: 'x-long', value }]);
      assert.deepEqual([...block.subarray(8, 8 + prefix.length)], prefix, `length ${len}`);
      assert.equal(block.length, 8 + prefix.length + len);
      assert.deepEqual(roundTrip([{ name: 'x-long', value }]), { 'x-long': value });
    }
  });

  it('sensitive fields are never indexed, even on a static exact match', () => {
    const token = 'eyJhbGciOiJSUzI1NiJ9.secret';
    const auth = encodeHeaders([{ name: 'authorization', value: token, sensitive: true }]);
    assert.equal(auth[0]! & 0xf0, 0x10);
    assert.deepEqual([...auth.subarray(0, 3)], [0x1f, 23 - 15, token.length]);
    const named = encodeHeaders([{ name: 'token', value: token, sensitive: true }]);
    assert.equal(named[0], 0x10);
    const get = encodeHeaders([{ name: ':method', value: 'GET', sensitive: true }]);
    assert.deepEqual(get, Buffer.from([0x12, 0x03, 0x47, 0x45, 0x54]));
    assert.deepEqual(
      roundTrip([
        { name: ':method', value: 'GET', sensitive: true },
        { name: 'authorization', value: token, sensitive: true },
        { name: 'token', value: token, sensitive: true },
      ]),
      { ':method': 'GET', authorization: token, token },
    );
  });

  it('a whole gRPC request block round-trips and leaves the table empty', () => {
    const fields: HeaderField[] = [
      { name: ':method', value: 'POST' },
      { name: ':scheme', value: 'http' },
      { name: ':path', value: '/etcdserverpb.KV/Range' },
      { name: ':authority', value: '127.0.0.1:2379' },
      { name: 'content-type', value: 'application/grpc' },
      { name: 'te', value: 'trailers' },
      { name: 'grpc-timeout', value: '1999m' },
      { name: 'token', value: 't'.repeat(300), sensitive: true },
    ];
    const d = new HpackDecoder();
    for (let i = 0; i < 3; i++) {
      same(
        d.decode(encodeHeaders(fields)),
        Object.fromEntries(fields.map((f) => [f.name, f.value])),
      );
      assert.equal(d.length, 0);
    }
  });
});

// ---- Interop with nghttp2 (node:http2's server) over a raw socket ----------------------------

const PREFACE = Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n', 'latin1');
const DATA = 0;
const HEADERS = 1;
const RST_STREAM = 3;
const SETTINGS = 4;
const GOAWAY = 7;
const CONTINUATION = 9;
const END_STREAM = 0x1;
const ACK = 0x1;
const END_HEADERS = 0x4;
const PADDED = 0x8;
const PRIORITY = 0x20;

function frame(type: number, flags: number, stream: number, payload: Buffer = Buffer.alloc(0)): Buffer {
  const h = Buffer.alloc(9);
  h.writeUIntBE(payload.length, 0, 3);
  h[3] = type;
  h[4] = flags;
  h.writeUInt32BE(stream & 0x7fffffff, 5);
  return Buffer.concat([h, payload]);
}

/** What one request got back: its decoded headers, and the raw header block's size and first byte. */
interface Response {
  stream: number;
  headers: HeaderMap;
  blockBytes: number;
  firstByte: number;
}

/**
 * Speaks just enough HTTP/2 over `socket` to send `count` GET requests (streams 1, 3, 5, ...) and
 * collect their header-only responses, decoding every header block in arrival order with `decoder`.
 */
function exchange(socket: net.Socket, decoder: HpackDecoder, count: number, tableSize?: number): Promise<Response[]> {
  return new Promise<Response[]>((resolve, reject) => {
    const settings = Buffer.alloc(tableSize === undefined ? 0 : 6);
    if (tableSize !== undefined) {
      settings.writeUInt16BE(http2.constants.NGHTTP2_SETTINGS_HEADER_TABLE_SIZE, 0);
      settings.writeUInt32BE(tableSize, 2);
    }
    const request = encodeHeaders([
      { name: ':method', value: 'GET' },
      { name: ':scheme', value: 'http' },
      { name: ':path', value: '/x' },
      { name: ':authority', value: '127.0.0.1' },
    ]);
    const responses: Response[] = [];
    let sent = false;
    let buf = Buffer.alloc(0);
    /** A header block spread over HEADERS and CONTINUATION frames. */
    let pending: { stream: number; end: boolean; parts: Buffer[] } | undefined;

    const fail = (e: unknown): void => {
      socket.off('data', onData);
      reject(e instanceof Error ? e : new Error(String(e)));
    };
    const onBlock = (stream: number, end: boolean, block: Buffer): void => {
      responses.push({ stream, headers: decoder.decode(block), blockBytes: block.length, firstByte: block[0]! });
      if (!end) throw new Error(`stream ${stream}: headers without END_STREAM (a body or trailers follow)`);
      if (responses.length === count) {
        socket.off('data', onData);
        resolve(responses);
      }
    };
    const onFrame = (type: number, flags: number, stream: number, payload: Buffer): void => {
      if (pending !== undefined && type !== CONTINUATION) throw new Error(`frame type ${type} inside a header block`);
      switch (type) {
        case SETTINGS:
          if (flags & ACK) return;
          socket.write(frame(SETTINGS, ACK, 0));
          if (!sent) {
            sent = true;
            for (let i = 0; i < count; i++) socket.write(frame(HEADERS, END_STREAM | END_HEADERS, 2 * i + 1, request));
          }
          return;
        case HEADERS: {
          let p = payload;
          let pad = 0;
          if (flags & PADDED) {
            pad = p[0]!;
            p = p.subarray(1);
          }
          if (flags & PRIORITY) p = p.subarray(5);
          p = p.subarray(0, p.length - pad);
          const end = (flags & END_STREAM) !== 0;
          if (flags & END_HEADERS) onBlock(stream, end, p);
          else pending = { stream, end, parts: [p] };
          return;
        }
        case CONTINUATION:
          if (pending === undefined || pending.stream !== stream) throw new Error('stray CONTINUATION');
          pending.parts.push(payload);
          if (flags & END_HEADERS) {
            const { end, parts } = pending;
            pending = undefined;
            onBlock(stream, end, Buffer.concat(parts));
          }
          return;
        case DATA:
          throw new Error(`unexpected DATA on stream ${stream}`);
        case RST_STREAM:
          throw new Error(`RST_STREAM ${payload.readUInt32BE(0)} on stream ${stream}`);
        case GOAWAY:
          throw new Error(`GOAWAY ${payload.readUInt32BE(4)}: ${payload.subarray(8).toString()}`);
        default:
          return; // WINDOW_UPDATE, PING, ...: nothing to do for header-only responses
      }
    };
    const onData = (chunk: Buffer): void => {
      buf = Buffer.concat([buf, chunk]);
      try {
        while (buf.length >= 9) {
          const len = buf.readUIntBE(0, 3);
          if (buf.length < 9 + len) break;
          const type = buf[3]!;
          const flags = buf[4]!;
          const stream = buf.readUInt32BE(5) & 0x7fffffff;
          const payload = buf.subarray(9, 9 + len);
          buf = buf.subarray(9 + len);
          onFrame(type, flags, stream, payload);
        }
      } catch (e) {
        fail(e);
      }
    };
    socket.on('data', onData);
    socket.once('error', fail);
    socket.once('close', () => fail(new Error(`socket closed after ${responses.length} responses`)));
    socket.write(Buffer.concat([PREFACE, frame(SETTINGS, 0, 0, settings)]));
  });
}

describe('HPACK decoder against nghttp2 (node:http2 server, raw client socket)', () => {
  const LONG = 'the quick brown fox jumps over the lazy dog; '.repeat(8); // 360 bytes, Huffman-friendly
  // Every byte node lets into a header value (tab, printable ASCII, 0x80-0xff as latin1), in a value
  // long and plain enough that nghttp2 still Huffman-codes it, so even the long codes are crossed.
  const ODD = '\t' + Array.from({ length: 0x7f - 0x20 }, (_, i) => String.fromCharCode(0x20 + i)).join('') +
    Array.from({ length: 0x80 }, (_, i) => String.fromCharCode(0x80 + i)).join('') + 'e'.repeat(1500);

  /** The headers the server sends to its `n`th request (1-based); 'date' fixed so repeats match. */
  const sent = (n: number): Record<string, string | string[]> => ({
    ':status': '200',
    'content-type': 'application/grpc',
    date: 'Mon, 21 Oct 2013 20:13:21 GMT',
    'x-long': LONG,
    'x-odd': ODD,
    'x-multi': ['one', 'two'],
    'x-request': `request number ${n}`,
    'grpc-status': '0',
  });
  const expected = (n: number): HeaderMap =>
    Object.fromEntries(Object.entries(sent(n)).map(([k, v]) => [k, Array.isArray(v) ? v.join(', ') : v]));

  for (const tableSize of [undefined, 256, 0]) {
    const label = tableSize === undefined ? 'the default 4096-byte table' : `a ${tableSize}-byte table announced`;
    it(`stays in step over 3 responses with ${label}`, { timeout: 20_000 }, async () => {
      const seen: http2.IncomingHttpHeaders[] = [];
      const server = http2.createServer();
      server.on('stream', (stream, headers) => {
        seen.push(headers);
        stream.respond(sent(seen.length), { endStream: true });
      });
      await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
      const { port } = server.address() as AddressInfo;
      const socket = net.connect(port, '127.0.0.1');
      try {
        const decoder = new HpackDecoder(tableSize);
        const responses = await exchange(socket, decoder, 3, tableSize);

        assert.deepEqual(
          responses.map((r) => r.stream),
          [1, 3, 5],
        );
        responses.forEach((r, i) => same(r.headers, expected(i + 1), `response ${i + 1}`));
        // Our encoder's requests reached the server as written.
        assert.equal(seen.length, 3);
        for (const h of seen) {
          assert.equal(h[':method'], 'GET');
          assert.equal(h[':scheme'], 'http');
          assert.equal(h[':path'], '/x');
          assert.equal(h[':authority'], '127.0.0.1');
        }
        // Huffman: the first block is shorter than the raw bytes of its long values alone.
        const first = responses[0]!.blockBytes;
        assert.ok(first < LONG.length + ODD.length, `first block ${first} bytes`);
        if (tableSize === undefined) {
          // The dynamic table: later blocks refer to what the first one stored.
          assert.ok(decoder.length > 0);
          assert.ok(responses[1]!.blockBytes < first / 10, `second block ${responses[1]!.blockBytes} bytes`);
          assert.ok(responses[2]!.blockBytes < first / 10, `third block ${responses[2]!.blockBytes} bytes`);
        } else {
          // nghttp2 shrank its table to what we announced: the first block opens with a size update.
          assert.equal(responses[0]!.firstByte & 0xe0, 0x20);
          if (tableSize === 0) assert.equal(decoder.length, 0);
        }
      } finally {
        socket.destroy();
        await new Promise<void>((resolve) => server.close(() => resolve()));
      }
    });
  }
});
