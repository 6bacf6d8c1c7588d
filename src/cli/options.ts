// Options every command shares (connection, TLS, auth, --debug, --help) and the parsers of values.
import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { Client, MAX_TTL, validateName, type ClientOptions } from '../index.js';
import { CliError, EXIT, UsageError } from './output.js';

/** Connection options, named as etcdctl names them so the same habits and env vars work. */
export const COMMON = {
  endpoints: { type: 'string' },
  cacert: { type: 'string' },
  cert: { type: 'string' },
  key: { type: 'string' },
  user: { type: 'string' },
  password: { type: 'string' },
  'dial-timeout': { type: 'string' },
  debug: { type: 'boolean' },
  help: { type: 'boolean', short: 'h' },
} as const;

/** Options of COMMON that take a value: main.ts skips them when looking for the command word. */
export const COMMON_WITH_VALUE = new Set(
  Object.entries(COMMON)
    .filter(([, o]) => o.type === 'string')
    .map(([k]) => `--${k}`),
);

export const COMMON_HELP = `Connection options (as etcdctl; each also read from ETCDCTL_<NAME>, e.g. ETCDCTL_ENDPOINTS):
  --endpoints <list>      comma-separated host:port or http(s)://host:port (default 127.0.0.1:2379)
  --cacert <file>         CA bundle to verify the servers' certificates (PEM)
  --cert <file>           client certificate (PEM), with --key
  --key <file>            client private key (PEM), with --cert
  --user <name:password>  authenticate as this etcd user
  --password <password>   the password, when --user has none (prefer ETCDCTL_PASSWORD)
  --dial-timeout <dur>    how long to wait for a connection to an endpoint (default 2s)
  --debug                 print stack traces with errors
  -h, --help              show this help`;

type Spec = Record<string, { type: 'string' | 'boolean'; short?: string }>;
type Values<O extends Spec> = { [K in keyof O]?: O[K]['type'] extends 'string' ? string : boolean };

/** parseArgs, with its errors turned into usage errors (exit 2) in our own words. */
export function parse<O extends Spec>(args: string[], options: O): { values: Values<O>; positionals: string[] } {
  try {
    const { values, positionals } = parseArgs({ args: attachDashValues(args, options), options, allowPositionals: true, strict: true });
    return { values: values as Values<O>, positionals };
  } catch (err) {
    const e = err as Error & { code?: string };
    // The option as parseArgs quotes it: '--ttl <value>', or '-l, --listen' for one with a short
    // form, whose long name is the one to show.
    const opt = /'(?:-[^-' ], )?(-[^' ]*)/.exec(e.message)?.[1] ?? e.message;
    if (e.code === 'ERR_PARSE_ARGS_UNKNOWN_OPTION') throw new UsageError(`unknown option ${opt}`);
    if (e.code === 'ERR_PARSE_ARGS_INVALID_OPTION_VALUE') {
      if (/argument missing/.test(e.message)) throw new UsageError(`${opt} needs a value`);
      if (/does not take an argument/.test(e.message)) throw new UsageError(`${opt} takes no value`);
    }
    if (e.code?.startsWith('ERR_PARSE_ARGS')) throw new UsageError(e.message.split(/\.\s/)[0]!);
    throw err;
  }
}

/**
 * parseArgs refuses `--ttl -1` as ambiguous (is -1 a value or an option?). A value that starts with
 * one dash and is not one of our short options is a value: `--ttl -1` reads as `--ttl=-1`, so the
 * option's own check explains what is wrong with it. An option in its place (`--endpoints --debug`)
 * means the value was forgotten.
 */
function attachDashValues(args: string[], options: Spec): string[] {
  const shorts = new Set(Object.values(options).flatMap((o) => (o.short === undefined ? [] : [`-${o.short}`])));
  const out: string[] = [];
  for (let i = 0; i < args.length; i++) {
    const arg = args[i]!;
    if (arg === '--') {
      out.push(...args.slice(i));
      break;
    }
    const name = arg.startsWith('--') && !arg.includes('=') ? arg.slice(2) : undefined;
    const next = args[i + 1];
    if (name === undefined || !Object.hasOwn(options, name) || options[name]!.type !== 'string' || next === undefined || !next.startsWith('-') || next === '-') {
      out.push(arg);
      continue;
    }
    if (next.startsWith('--') || shorts.has(next)) throw new UsageError(`--${name} needs a value, but ${next} follows it`);
    out.push(`--${name}=${next}`);
    i++;
  }
  return out;
}

/** Splits `args` at the first `--`: our arguments before it, the command to run after it. */
export function splitAtDashes(args: string[]): [string[], string[] | undefined] {
  const i = args.indexOf('--');
  return i < 0 ? [args, undefined] : [args.slice(0, i), args.slice(i + 1)];
}

/** A lock or election name, checked before anything is sent. */
export function nameArg(name: string | undefined, what: string): string {
  if (name === undefined) throw new UsageError(`missing the ${what}`);
  try {
    return validateName(name, what);
  } catch (err) {
    throw new UsageError((err as Error).message);
  }
}

/** etcd's smallest lease TTL with its default election timeout (1 s): 1.5 election timeouts, rounded up. */
export const MIN_TTL = 2;

/** A lease TTL in whole seconds (etcdctl's --ttl). */
export function ttlArg(raw: string | undefined, fallback: number): number {
  if (raw === undefined) return fallback;
  const n = /^\d+$/.test(raw) ? Number(raw) : NaN;
  if (!Number.isSafeInteger(n) || n < 1 || n > MAX_TTL) {
    throw new UsageError(`--ttl must be a whole number of seconds from ${MIN_TTL} to ${MAX_TTL}, got "${raw}"`);
  }
  if (n < MIN_TTL) {
    // etcd grants at least its minimum TTL (1.5 election timeouts, rounded up: 2 s by default).
    throw new UsageError(`--ttl ${raw} is below etcd's minimum lease TTL, which etcd would silently use instead; use --ttl ${MIN_TTL} or more`);
  }
  return n;
}

const UNITS: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000 };

/** A duration like Go's: `500ms`, `10s`, `1.5m`, `2h`; a bare number means seconds. Returns milliseconds. */
export function durationArg(raw: string, flag: string, { allowZero = false } = {}): number {
  const m = /^(\d+(?:\.\d+)?)(ms|s|m|h)?$/.exec(raw.trim());
  const ms = m ? Number(m[1]) * UNITS[m[2] ?? 's']! : NaN;
  if (!Number.isFinite(ms) || ms < 0 || (ms === 0 && !allowZero) || ms > 2 ** 31 - 1) {
    throw new UsageError(`${flag} must be a duration like 500ms, 10s or 2m${allowZero ? '' : ' (above zero)'}, got "${raw}"`);
  }
  return ms;
}

interface ConnectionValues {
  endpoints?: string | undefined;
  cacert?: string | undefined;
  cert?: string | undefined;
  key?: string | undefined;
  user?: string | undefined;
  password?: string | undefined;
  'dial-timeout'?: string | undefined;
}

/** The Client the options and ETCDCTL_* variables describe. Never starts a server. */
export function connect(values: ConnectionValues): Client {
  // An empty variable counts as unset, as etcdctl treats it.
  const env = (name: string): string | undefined => process.env[`ETCDCTL_${name}`] || undefined;
  const options: ClientOptions = {
    endpoints: values.endpoints ?? env('ENDPOINTS') ?? '127.0.0.1:2379',
    dialTimeoutMs: durationArg(values['dial-timeout'] ?? env('DIAL_TIMEOUT') ?? '2s', '--dial-timeout'),
  };
  const cacert = values.cacert ?? env('CACERT');
  const cert = values.cert ?? env('CERT');
  const key = values.key ?? env('KEY');
  if (cacert !== undefined || cert !== undefined || key !== undefined) {
    if ((cert === undefined) !== (key === undefined)) throw new UsageError('give --cert and --key together, or neither');
    options.tls = {};
    if (cacert !== undefined) options.tls.ca = readPem(cacert, '--cacert');
    if (cert !== undefined) options.tls.cert = readPem(cert, '--cert');
    if (key !== undefined) options.tls.key = readPem(key, '--key');
  }
  const user = values.user ?? env('USER');
  if (user !== undefined) {
    // "name:password" as etcdctl, or the password apart; it is never printed.
    const colon = user.indexOf(':');
    const username = colon < 0 ? user : user.slice(0, colon);
    const password = colon < 0 ? (values.password ?? env('PASSWORD')) : user.slice(colon + 1);
    if (username === '') throw new UsageError('--user has no user name; use --user name:password');
    if (password === undefined) throw new UsageError('--user has no password; use --user name:password or set ETCDCTL_PASSWORD');
    options.auth = { username, password };
  }
  return new Client(options);
}

function readPem(path: string, flag: string): Buffer {
  try {
    return readFileSync(path);
  } catch (err) {
    throw new CliError(`${flag}: cannot read ${path} (${(err as NodeJS.ErrnoException).code ?? (err as Error).message})`, EXIT.usage);
  }
}
