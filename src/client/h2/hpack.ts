// HPACK (RFC 7541), the part a gRPC client needs: a full decoder (static and dynamic tables,
// Huffman strings, table size updates), since etcd's grpc-go indexes and Huffman-codes what it
// sends; and an encoder that never indexes (static-table names, raw strings), so we keep no
// encoder state and the server's table of our headers stays empty.
import { HUFFMAN_CODES, HUFFMAN_LENGTHS, STATIC_TABLE } from './hpack-tables.js';

/** A header block that does not decode: a connection error (COMPRESSION_ERROR), the table is out of step. */
export class HpackError extends Error {
  constructor(message: string) {
    super(`HPACK: ${message}`);
    this.name = 'HpackError';
  }
}

/** Decoded headers: lowercase names; a repeated name's values joined by ', ' (as node:http2 does). */
export type HeaderMap = Record<string, string>;

/** The decoding state of one connection: its dynamic table, newest entry first. */
export class HpackDecoder {
  private readonly names: string[] = [];
  private readonly values: string[] = [];
  private size = 0;
  private capacity: number;

  /** `maxSize`: the SETTINGS_HEADER_TABLE_SIZE we announced (4096 unless told otherwise). */
  constructor(private readonly maxSize = 4096) {
    this.capacity = maxSize;
  }

  decode(block: Buffer): HeaderMap {
    // No prototype: a header named `constructor` or `__proto__` is a header like any other.
    const out: HeaderMap = Object.create(null) as HeaderMap;
    const add = (name: string, value: string): void => {
      const had = out[name];
      out[name] = had === undefined ? value : `${had}, ${value}`;
    };
    const r = { pos: 0 };
    let fields = 0;
    while (r.pos < block.length) {
      const b = block[r.pos]!;
      if (b & 0x80) {
        // Indexed field.
        const i = readInt(block, r, 7);
        if (i === 0) throw new HpackError('index 0');
        const [n, v] = this.entry(i);
        add(n, v);
      } else if (b & 0x40) {
        // Literal with incremental indexing.
        const i = readInt(block, r, 6);
        const name = i === 0 ? readString(block, r) : this.entry(i)[0];
        const value = readString(block, r);
        this.insert(name, value);
        add(name, value);
      } else if (b & 0x20) {
        // Dynamic table size update: only at the start of a block, within what we announced.
        if (fields > 0) throw new HpackError('table size update after a field');
        const size = readInt(block, r, 5);
        if (size > this.maxSize) throw new HpackError(`table size ${size} above ${this.maxSize}`);
        this.capacity = size;
        this.evict(0);
        continue;
      } else {
        // Literal without indexing (0000) or never indexed (0001).
        const i = readInt(block, r, 4);
        const name = i === 0 ? readString(block, r) : this.entry(i)[0];
        add(name, readString(block, r));
      }
      fields++;
    }
    return out;
  }

  /** Entries in the dynamic table (for tests). */
  get length(): number {
    return this.names.length;
  }

  private entry(i: number): readonly [string, string] {
    if (i <= STATIC_TABLE.length) return STATIC_TABLE[i - 1]!;
    const d = i - STATIC_TABLE.length - 1;
    if (d >= this.names.length) throw new HpackError(`index ${i} beyond the tables (${STATIC_TABLE.length} + ${this.names.length})`);
    return [this.names[d]!, this.values[d]!];
  }

  private insert(name: string, value: string): void {
    const size = name.length + value.length + 32;
    this.evict(size);
    // An entry larger than the table empties it and is not added (RFC 7541, 4.4).
    if (size > this.capacity) return;
    this.names.unshift(name);
    this.values.unshift(value);
    this.size += size;
  }

  private evict(room: number): void {
    while (this.names.length > 0 && this.size + room > this.capacity) {
      const n = this.names.pop()!;
      const v = this.values.pop()!;
      this.size -= n.length + v.length + 32;
    }
  }
}

function readInt(buf: Buffer, r: { pos: number }, prefix: number): number {
  if (r.pos >= buf.length) throw new HpackError('truncated integer');
  const mask = (1 << prefix) - 1;
  let v = buf[r.pos++]! & mask;
  if (v < mask) return v;
  let shift = 0;
  for (;;) {
    if (r.pos >= buf.length) throw new HpackError('truncated integer');
    const b = buf[r.pos++]!;
    v += (b & 0x7f) * 2 ** shift;
    shift += 7;
    if ((b & 0x80) === 0) break;
    if (shift > 28) throw new HpackError('integer too large');
  }
  if (v > 0x7fffffff) throw new HpackError('integer too large');
  return v;
}

/** A string literal; bytes as latin1 characters, as node:http2 hands header values over. */
function readString(buf: Buffer, r: { pos: number }): string {
  if (r.pos >= buf.length) throw new HpackError('truncated string');
  const huffman = (buf[r.pos]! & 0x80) !== 0;
  const len = readInt(buf, r, 7);
  const end = r.pos + len;
  if (end > buf.length) throw new HpackError('truncated string');
  const s = huffman ? huffmanDecode(buf, r.pos, end) : buf.toString('latin1', r.pos, end);
  r.pos = end;
  return s;
}

/**
 * The Huffman code as a binary tree in one array: node n's children are at [2n] and [2n + 1]; a
 * child >= 0 is another node, a child < 0 is the symbol -child - 1 (256 is EOS).
 */
const TREE = buildTree();

function buildTree(): Int32Array {
  const tree = new Int32Array(2 * 512).fill(0);
  let nodes = 1;
  const codes = [...HUFFMAN_CODES, 0x3fffffff];
  const lengths = [...HUFFMAN_LENGTHS, 30];
  for (let sym = 0; sym < codes.length; sym++) {
    const code = codes[sym]!;
    const len = lengths[sym]!;
    let node = 0;
    for (let bit = len - 1; bit >= 0; bit--) {
      const slot = 2 * node + ((code >>> bit) & 1);
      if (bit === 0) {
        tree[slot] = -sym - 1;
      } else {
        if (tree[slot] === 0) tree[slot] = nodes++;
        node = tree[slot]!;
      }
    }
  }
  return tree;
}

function huffmanDecode(buf: Buffer, start: number, end: number): string {
  let out = '';
  let node = 0;
  // Bits read since the last symbol, and whether all were 1: the padding must be a prefix of EOS.
  let pending = 0;
  let ones = true;
  for (let i = start; i < end; i++) {
    const byte = buf[i]!;
    for (let bit = 7; bit >= 0; bit--) {
      const b = (byte >>> bit) & 1;
      const next = TREE[2 * node + b]!;
      pending++;
      ones &&= b === 1;
      if (next < 0) {
        const sym = -next - 1;
        if (sym === 256) throw new HpackError('EOS in a Huffman string');
        out += String.fromCharCode(sym);
        node = 0;
        pending = 0;
        ones = true;
      } else {
        node = next;
      }
    }
  }
  if (pending > 7 || !ones) throw new HpackError('bad Huffman padding');
  return out;
}

/** One header to send; `sensitive` ones (credentials) go as never-indexed literals. */
export interface HeaderField {
  name: string;
  value: string;
  sensitive?: boolean;
}

/** Static-table indexes: of each full field (`name\0value`), and of each name's first entry. */
const STATIC_FIELD = new Map<string, number>();
const STATIC_NAME = new Map<string, number>();
STATIC_TABLE.forEach(([n, v], i) => {
  if (!STATIC_FIELD.has(`${n}\0${v}`)) STATIC_FIELD.set(`${n}\0${v}`, i + 1);
  if (!STATIC_NAME.has(n)) STATIC_NAME.set(n, i + 1);
});

/** A header block that leaves the peer's dynamic table untouched. Names must be lowercase. */
export function encodeHeaders(fields: readonly HeaderField[]): Buffer {
  const parts: number[] = [];
  for (const f of fields) {
    const exact = f.sensitive ? undefined : STATIC_FIELD.get(`${f.name}\0${f.value}`);
    if (exact !== undefined) {
      writeInt(parts, exact, 7, 0x80);
      continue;
    }
    const nameIndex = STATIC_NAME.get(f.name) ?? 0;
    writeInt(parts, nameIndex, 4, f.sensitive ? 0x10 : 0x00);
    if (nameIndex === 0) writeString(parts, f.name);
    writeString(parts, f.value);
  }
  return Buffer.from(parts);
}

function writeInt(out: number[], v: number, prefix: number, flags: number): void {
  const mask = (1 << prefix) - 1;
  if (v < mask) {
    out.push(flags | v);
    return;
  }
  out.push(flags | mask);
  v -= mask;
  while (v >= 0x80) {
    out.push((v & 0x7f) | 0x80);
    v = Math.floor(v / 0x80);
  }
  out.push(v);
}

/** A raw (not Huffman-coded) string literal, one byte a character (latin1), as the decoder reads them. */
function writeString(out: number[], s: string): void {
  const bytes = Buffer.from(s, 'latin1');
  writeInt(out, bytes.length, 7, 0x00);
  for (const b of bytes) out.push(b);
}
