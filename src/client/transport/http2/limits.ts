// The numbers a member's connection lives within; CONTRIBUTING.md's "The connection's limits" documents them.

/** The bounds a member's connection lives within, whatever the server sends. */
export const LIMITS = {
  /** nghttp2's memory for one session (MB): header tables, queued frames; a header block received above it resets its stream. */
  maxSessionMemoryMb: 32,
  /** Header fields in one received header block. */
  maxHeaderListPairs: 64,
  /** Bytes of one received header block once decoded (SETTINGS_MAX_HEADER_LIST_SIZE, enforced on receipt). */
  maxHeaderListSize: 16 * 1024,
  /** Pings of ours awaiting an answer; we keep at most one in flight. */
  maxOutstandingPings: 2,
  /** Entries in one SETTINGS frame from the server. */
  maxSettings: 32,
  /** Characters of a server's grpc-message kept in an error. */
  grpcMessageChars: 512,
} as const;

/** Each stream's receive window (we read at once, so it bounds nothing but throughput). */
export const STREAM_WINDOW = 1024 * 1024;

/** The connection's receive window, shared by every call and stream to the member. */
export const CONNECTION_WINDOW = 8 * 1024 * 1024;

/** Stream ids are 31 bits: well before they run out, new calls go to a new connection. */
export const LAST_STREAM_ID = 2 ** 31 - 2 ** 20;
