// gRPC's message framing (PROTOCOL-HTTP2, "Length-Prefixed-Message"): a compressed flag byte, a
// 4-byte big-endian length, then the message. Written here once for unary calls and streams alike.

/** `body` behind its 5-byte prefix (uncompressed). */
export function frame(body: Uint8Array): Buffer {
  const out = Buffer.allocUnsafe(5 + body.length);
  out[0] = 0;
  out.writeUInt32BE(body.length, 1);
  out.set(body, 5);
  return out;
}

/** Each of `bodies` behind its prefix, one after another in one buffer: several messages, one write. */
export function frameAll(bodies: readonly Uint8Array[]): Buffer {
  let size = 0;
  for (const b of bodies) size += 5 + b.length;
  const out = Buffer.allocUnsafe(size);
  let at = 0;
  for (const b of bodies) {
    out[at] = 0;
    out.writeUInt32BE(b.length, at + 1);
    out.set(b, at + 5);
    at += 5 + b.length;
  }
  return out;
}

/** Why a received byte stream is not a valid message sequence. */
export class FramingError extends Error {
  constructor(
    readonly kind: 'too-large' | 'compressed',
    message: string,
  ) {
    super(message);
    this.name = 'FramingError';
  }
}

/**
 * Splits received bytes into messages. A length above `maxMessageBytes` is refused as soon as the
 * prefix arrives, before any of the message is buffered; a message's bytes are copied once, into a
 * buffer of its announced size.
 */
export class MessageDecoder {
  private readonly head = Buffer.alloc(5);
  private headFill = 0;
  private body: Buffer | undefined;
  private bodyFill = 0;

  constructor(private readonly maxMessageBytes: number) {}

  /** Bytes buffered for a message not yet complete. */
  get buffered(): number {
    return this.headFill + this.bodyFill;
  }

  /** Feeds `chunk`; returns the messages it completed. Throws a FramingError on a bad prefix. */
  push(chunk: Uint8Array): Buffer[] {
    const out: Buffer[] = [];
    let at = 0;
    while (at < chunk.length) {
      if (this.body === undefined) {
        const n = Math.min(5 - this.headFill, chunk.length - at);
        this.head.set(chunk.subarray(at, at + n), this.headFill);
        this.headFill += n;
        at += n;
        if (this.headFill < 5) break;
        if (this.head[0] !== 0)
          throw new FramingError('compressed', 'the server sent a compressed message, but no compression was negotiated');
        const len = this.head.readUInt32BE(1);
        if (len > this.maxMessageBytes) {
          throw new FramingError(
            'too-large',
            `the server announced a message of ${len} bytes, above the limit of ${this.maxMessageBytes} (maxReceiveMessageBytes)`,
          );
        }
        this.body = Buffer.allocUnsafe(len);
        this.bodyFill = 0;
      }
      const n = Math.min(this.body.length - this.bodyFill, chunk.length - at);
      this.body.set(chunk.subarray(at, at + n), this.bodyFill);
      this.bodyFill += n;
      at += n;
      if (this.bodyFill === this.body.length) {
        out.push(this.body);
        this.body = undefined;
        this.headFill = 0;
        this.bodyFill = 0;
      }
    }
    return out;
  }
}
