// Exit codes, error reporting and printing, shared by every command.
import { constants } from 'node:os';
import { InvalidArgumentError, OwnershipLostError, SessionExpiredError, UnavailableError } from '../index.js';

/** Exit codes (documented in docs/cli.md). A command's own code is passed through as is. */
export const EXIT = {
  ok: 0,
  error: 1,
  usage: 2,
  /** The lock or leadership (or the session holding it) was lost. */
  lost: 3,
  /** `lock --timeout` expired before the lock was ours. */
  timeout: 4,
  /** The command could not be executed (found but not runnable), as shells do. */
  cannotExecute: 126,
  /** The command was not found, as shells do. */
  notFound: 127,
} as const;

/** Bad command line: exit 2 with the message (and a pointer to --help). */
export class UsageError extends Error {}

/** A failure whose message is already phrased for the user, with its exit code. */
export class CliError extends Error {
  constructor(
    message: string,
    readonly exitCode: number,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}

/** The shell's exit code for a death by `signal`: 128 + its number (130 for SIGINT, 143 for SIGTERM). */
export function signalExitCode(signal: NodeJS.Signals): number {
  return 128 + (constants.signals[signal] ?? 0);
}

export let debug = false;
export function setDebug(on: boolean): void {
  debug = on;
}

/**
 * What a terminal acts on, or what changes how a line reads: C0 controls (ESC starts an escape
 * sequence: clear the screen, set the title, write the clipboard), DEL, C1 controls (U+0080-U+009F:
 * CSI and OSC in one character), the bidi marks, embeddings, overrides and isolates, the line and
 * paragraph separators, and lone surrogates. Keys and values come from whoever can write to etcd.
 */
const UNSAFE =
  /[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]|[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/g;

/**
 * `text` made inert for a terminal: each character of UNSAFE becomes its `\uXXXX` escape (as in
 * JSON, so JSON stays valid and gives the same string back), except `keep`'s. Every line this CLI
 * writes goes through it; {@link token} quotes a value first so that its escapes read unambiguously.
 */
export function inert(text: string, keep = ''): string {
  return text.replace(UNSAFE, (c) => (keep.includes(c) ? c : `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`));
}

/** Lines on stdout (help texts are several): inert but for their line breaks. */
export function print(line: string): void {
  process.stdout.write(`${inert(line, '\n')}\n`);
}

/** One JSON document on one line; bigints become strings, as in etcd's own JSON (proto3 mapping of int64). */
export function printJson(value: unknown): void {
  print(JSON.stringify(value, (_k, v: unknown) => (typeof v === 'bigint' ? v.toString() : v)));
}

/** One line on stderr, prefixed with the program name: `etcd-concurrency: <message>`. */
export function warn(message: string): void {
  process.stderr.write(`etcd-concurrency: ${inert(message)}\n`);
}

/**
 * A key or value as one token on a line: bare when it is plain, else JSON-quoted (white space,
 * quotes, backslashes, and anything {@link inert} would escape), so that it reads as one string.
 */
export function token(value: string): string {
  return /^[^\s"'\\]+$/.test(value) && value.search(UNSAFE) < 0 ? value : JSON.stringify(value);
}

/** Reports `err` on one line of stderr (with the stack under --debug) and returns the exit code for it. */
export function report(err: unknown): number {
  const code = exitCodeOf(err);
  let message = err instanceof Error ? err.message : String(err);
  message = message.replace(/\s*\n\s*/g, ' ');
  if (err instanceof UsageError) message += ' (see --help)';
  if (err instanceof UnavailableError) message = withEndpointsHint(message);
  warn(message);
  if (debug) {
    for (let e: unknown = err, first = true; e !== undefined; e = e instanceof Error ? e.cause : undefined, first = false) {
      process.stderr.write(`${inert(`${first ? '' : 'caused by: '}${e instanceof Error ? (e.stack ?? e.message) : String(e)}`, '\n')}\n`);
    }
  }
  return code;
}

/**
 * An unreachable etcd's message with the flag to pass named: the library's own advice ("pass the
 * right endpoints") cannot know it runs under this CLI. Where it gives no such advice, ours is added.
 */
function withEndpointsHint(message: string): string {
  const flag = '--endpoints (or set ETCDCTL_ENDPOINTS)';
  if (/pass the right endpoints$/.test(message)) return message.replace(/endpoints$/, flag);
  return `${message}; start a local etcd with \`etcd-concurrency dev\` or pass ${flag}`;
}

function exitCodeOf(err: unknown): number {
  if (err instanceof CliError) return err.exitCode;
  if (err instanceof UsageError || err instanceof InvalidArgumentError) return EXIT.usage;
  if (err instanceof OwnershipLostError || err instanceof SessionExpiredError) return EXIT.lost;
  return EXIT.error;
}

/** Rows aligned in columns (the last column is not padded). */
export function table(rows: string[][]): string[] {
  const widths = rows[0]!.map((_, i) => Math.max(...rows.map((r) => (r[i] ?? '').length)));
  return rows.map((r) => r.map((cell, i) => (i === r.length - 1 ? cell : cell.padEnd(widths[i]!))).join('  '));
}
