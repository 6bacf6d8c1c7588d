// The seam between the Connection (endpoints, failover, deadlines, auth, diagnosis) and what carries
// gRPC calls to one member. The Connection sees only this file; http2.ts is the one implementation.

/** gRPC status codes (wire values). */
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

/** A gRPC method: its HTTP/2 path and how its messages are encoded and decoded. */
export interface Method<Req, Res> {
  readonly path: string;
  encode(request: Req): Uint8Array;
  decode(bytes: Uint8Array): Res;
}

/** Request headers (gRPC metadata) beyond the fixed ones: `hasleader`, `token`. */
export type RequestHeaders = Readonly<Record<string, string>>;

/**
 * A call that failed in the transport or was ended by the server with a gRPC status other than OK.
 * `details` is the server's `grpc-message` (cleaned: control characters removed, length capped) or
 * our own account of what happened. `notSent`: the request certainly did not reach the server's
 * application, so even a write may be sent again.
 */
export class TransportError extends Error {
  /** The gRPC status. */
  readonly status: number;
  readonly details: string;
  readonly notSent: boolean;
  /** The call was cancelled by us (an AbortSignal), not by the server or the network. */
  readonly local: boolean;
  /** The status is the server's own answer (a valid grpc-status): the request was processed and refused. */
  readonly fromServer: boolean;

  constructor(
    status: number,
    details: string,
    options: { notSent?: boolean; local?: boolean; fromServer?: boolean; cause?: unknown } = {},
  ) {
    super(`${STATUS_NAME[status] ?? `status ${status}`}: ${details}`, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = 'TransportError';
    this.status = status;
    this.details = details;
    this.notSent = options.notSent ?? false;
    this.local = options.local ?? false;
    this.fromServer = options.fromServer ?? false;
  }
}

/** Why connect() gave up: nothing answered in time, the connection failed, or the transport is closed. */
export class ConnectError extends Error {
  constructor(
    readonly kind: 'timeout' | 'failed' | 'closed',
    readonly waitedMs: number,
    options?: { cause?: unknown },
  ) {
    super(
      kind === 'timeout'
        ? `no connection within ${Math.round(waitedMs)} ms`
        : kind === 'closed'
          ? 'the transport is closed'
          : `the connection failed${options?.cause instanceof Error ? `: ${options.cause.message}` : ''}`,
      options,
    );
    this.name = 'ConnectError';
  }
}

/**
 * A bidirectional stream (Watch, LeaseKeepAlive). 'data' for each decoded message; 'error' (a
 * TransportError) when it fails or the server ends it with a status other than OK; 'end' when the
 * server ends it with OK. After cancel() no event comes.
 */
export interface BidiStream<Req, Res> {
  write(message: Req): unknown;
  /** Writes `messages` in order as one write on the connection (one packet where they fit). */
  writeMany(messages: readonly Req[]): unknown;
  cancel(): void;
  on(event: 'data', listener: (message: Res) => void): unknown;
  on(event: 'error', listener: (err: Error) => void): unknown;
  on(event: 'end', listener: () => void): unknown;
  removeAllListeners(event?: string): unknown;
}

/** What carries calls to one member. */
export interface Transport {
  /** A connection is up and takes new calls. */
  readonly isReady: boolean;
  /**
   * Resolves once a connection is ready, or rejects with a ConnectError ('timeout' when `deadline`,
   * in performance.now() ms, passes first), or with `signal`'s reason.
   */
  connect(deadline: number, signal?: AbortSignal): Promise<void>;
  /** One unary call; rejects with a TransportError. Connects first when needed. */
  unary<Req, Res>(method: Method<Req, Res>, request: Req, headers: RequestHeaders, deadline: number, signal?: AbortSignal): Promise<Res>;
  /** A stream on the ready connection; with none, it fails at once (an 'error' on the next tick). */
  stream<Req, Res>(method: Method<Req, Res>, headers: RequestHeaders): BidiStream<Req, Res>;
  /** Calls in flight finish, new ones fail; the connection closes when idle. */
  close(): void;
}

/** Ends a stream of ours: no more events reach us, and its late error is swallowed. */
export function closeStream(stream: Pick<BidiStream<unknown, unknown>, 'removeAllListeners' | 'on' | 'cancel'>): void {
  stream.removeAllListeners();
  stream.on('error', () => {});
  stream.cancel();
}
