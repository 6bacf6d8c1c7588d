// The gRPC side of the h2 transport (../h2.ts): status codes, the error it rejects
// with, trailer metadata, and the wire helpers (grpc-timeout, grpc-message percent-decoding).
//
// The error has the shape of @grpc/grpc-js's ServiceError (an Error with a numeric `code`,
// `details` and `metadata.get(key)`) and the same `message` format, so that errors.ts
// (isServiceError, fromGrpcError, isEndpointFailure, provablyNotApplied, isStaleToken) reads it
// exactly as it reads grpc-js's.

/** gRPC status codes (the numbers are the wire values, the same as grpc-js's `status`). */
export const Status = {
  OK: 0,
  CANCELLED: 1,
  UNKNOWN: 2,
  INVALID_ARGUMENT: 3,
  DEADLINE_EXCEEDED: 4,
  NOT_FOUND: 5,
  ALREADY_EXISTS: 6,
  PERMISSION_DENIED: 7,
  RESOURCE_EXHAUSTED: 8,
  FAILED_PRECONDITION: 9,
  ABORTED: 10,
  OUT_OF_RANGE: 11,
  UNIMPLEMENTED: 12,
  INTERNAL: 13,
  UNAVAILABLE: 14,
  DATA_LOSS: 15,
  UNAUTHENTICATED: 16,
} as const;

const STATUS_NAME: readonly string[] = Object.keys(Status);

export type MetadataValue = string | Buffer;

/** Trailer metadata of a failed call: what grpc-js's Metadata offers for reading. */
export class H2Metadata {
  private readonly map = new Map<string, MetadataValue[]>();

  /** From HTTP/2 headers (trailers), without pseudo-headers, grpc-status and grpc-message. */
  static fromHeaders(headers: Record<string, string | string[] | number | undefined>): H2Metadata {
    const md = new H2Metadata();
    for (const key of Object.keys(headers)) {
      if (key.charCodeAt(0) === 58 /* ':' */ || key === 'grpc-status' || key === 'grpc-message') continue;
      const raw = headers[key];
      if (raw === undefined) continue;
      const values = Array.isArray(raw) ? raw : [String(raw)];
      for (const v of values) {
        if (key.endsWith('-bin')) for (const part of v.split(',')) md.add(key, Buffer.from(part.trim(), 'base64'));
        else md.add(key, v);
      }
    }
    return md;
  }

  get(key: string): MetadataValue[] {
    return this.map.get(key.toLowerCase()) ?? [];
  }

  set(key: string, value: MetadataValue): void {
    this.map.set(key.toLowerCase(), [value]);
  }

  add(key: string, value: MetadataValue): void {
    const k = key.toLowerCase();
    const list = this.map.get(k);
    if (list) list.push(value);
    else this.map.set(k, [value]);
  }

  remove(key: string): void {
    this.map.delete(key.toLowerCase());
  }

  /** The first value of each key. */
  getMap(): Record<string, MetadataValue> {
    const out: Record<string, MetadataValue> = {};
    for (const [k, v] of this.map) if (v.length > 0) out[k] = v[0]!;
    return out;
  }

  toJSON(): Record<string, MetadataValue[]> {
    return Object.fromEntries(this.map);
  }
}

/**
 * A failed call, shaped as grpc-js's ServiceError: `code`, `details`, `metadata`, and the message
 * `<code> <NAME>: <details>`. `notSent` is ours: true when the request certainly did not reach
 * etcd's application (no stream was opened, the stream was refused with REFUSED_STREAM, or a GOAWAY
 * named a last stream id below ours), so even a write may be sent again.
 */
export class H2ServiceError extends Error {
  readonly code: number;
  readonly details: string;
  readonly metadata: H2Metadata;
  readonly notSent: boolean;
  /** The RST_STREAM code the stream closed with, when that decided the status. */
  readonly rstCode?: number;

  constructor(code: number, details: string, options: { metadata?: H2Metadata; notSent?: boolean; rstCode?: number; cause?: unknown } = {}) {
    super(`${code} ${STATUS_NAME[code] ?? 'UNKNOWN'}: ${details}`, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = 'Error'; // as grpc-js's, whose errors are plain Errors
    this.code = code;
    this.details = details;
    this.metadata = options.metadata ?? new H2Metadata();
    this.notSent = options.notSent ?? false;
    if (options.rstCode !== undefined) this.rstCode = options.rstCode;
  }
}

/** The status of an HTTP response without grpc-status, as grpc-js maps it. */
export function fromHttpStatus(httpStatus: number, metadata?: H2Metadata): H2ServiceError {
  let code: number;
  switch (httpStatus) {
    case 400:
      code = Status.INTERNAL;
      break;
    case 401:
      code = Status.UNAUTHENTICATED;
      break;
    case 403:
      code = Status.PERMISSION_DENIED;
      break;
    case 404:
      code = Status.UNIMPLEMENTED;
      break;
    case 429:
    case 502:
    case 503:
    case 504:
      code = Status.UNAVAILABLE;
      break;
    default:
      code = Status.UNKNOWN;
  }
  return new H2ServiceError(code, `Received HTTP status code ${httpStatus}`, metadata ? { metadata } : {});
}

/**
 * grpc-message is percent-encoded UTF-8 (gRPC's PROTOCOL-HTTP2: every byte outside 0x20-0x7E, and
 * '%', as %XX). An invalid sequence is passed through as it came, as the spec asks of decoders.
 */
export function decodeGrpcMessage(s: string): string {
  if (!s.includes('%')) return s;
  try {
    return decodeURIComponent(s);
  } catch {
    // Decode the valid %XX escapes byte by byte; leave anything else as it is.
    const bytes: number[] = [];
    for (let i = 0; i < s.length; i++) {
      const c = s.charCodeAt(i);
      if (c === 37 /* % */ && /^[0-9a-fA-F]{2}$/.test(s.slice(i + 1, i + 3))) {
        bytes.push(parseInt(s.slice(i + 1, i + 3), 16));
        i += 2;
      } else {
        bytes.push(...Buffer.from(s[i]!, 'utf8'));
      }
    }
    return Buffer.from(bytes).toString('utf8');
  }
}

/**
 * The grpc-timeout header for `ms` milliseconds: at most 8 digits and a unit (gRPC's
 * PROTOCOL-HTTP2). Milliseconds, rounded up, while they fit; seconds beyond.
 */
export function grpcTimeout(ms: number): string {
  const m = Math.max(1, Math.ceil(ms));
  if (m < 100_000_000) return `${m}m`;
  const s = Math.ceil(m / 1000);
  if (s < 100_000_000) return `${s}S`;
  return `${Math.min(99_999_999, Math.ceil(s / 3600))}H`;
}

/** "1.234s", as grpc-js formats the time a deadline allowed. */
export function seconds(ms: number): string {
  return `${(ms / 1000).toFixed(3)}s`;
}
