// Options every command shares (connection, TLS, auth, --debug, --help) and the parsers of values.
import { promises as dnsPromises, type SrvRecord } from 'node:dns';
import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { Client, MAX_TTL, validateName, type ClientOptions, type TelemetryOptions } from '../index.js';
import { nearest } from '../spelling.js';
import { CliError, EXIT, setDebug, UsageError, warn } from './output.js';

/**
 * Connection options: etcdctl's global flags, named as etcdctl names them, so that the same habits
 * and ETCDCTL_* variables work. Those etcdctl treats as booleans also take `=true`/`=false`.
 */
export const COMMON = {
  endpoints: { type: 'string' },
  'discovery-srv': { type: 'string' },
  'discovery-srv-name': { type: 'string' },
  'insecure-discovery': { type: 'boolean' },
  cacert: { type: 'string' },
  cert: { type: 'string' },
  key: { type: 'string' },
  'insecure-transport': { type: 'boolean' },
  'insecure-skip-tls-verify': { type: 'boolean' },
  user: { type: 'string' },
  password: { type: 'string' },
  'auth-jwt-token': { type: 'string' },
  'dial-timeout': { type: 'string' },
  'command-timeout': { type: 'string' },
  'keepalive-time': { type: 'string' },
  'keepalive-timeout': { type: 'string' },
  debug: { type: 'boolean' },
  help: { type: 'boolean', short: 'h' },
} as const;

/** Options of COMMON that take a value: main.ts skips them when looking for the command word. */
export const COMMON_WITH_VALUE = new Set(
  Object.entries(COMMON)
    .filter(([, o]) => o.type === 'string')
    .map(([k]) => `--${k}`),
);

/** Boolean flags that, as in etcdctl (Go's pflag), also accept `--flag=true` and `--flag=false`. */
const GO_BOOLS = new Set(['insecure-discovery', 'insecure-transport', 'insecure-skip-tls-verify', 'debug']);

export const COMMON_HELP = `Connection options (as etcdctl's; each also read from ETCDCTL_<NAME>, e.g. ETCDCTL_ENDPOINTS;
a flag and its variable set together are refused, as etcdctl refuses them):
  --endpoints <list>      comma-separated host:port or http(s)://host:port (default 127.0.0.1:2379)
  --discovery-srv <domain>  find the endpoints in DNS SRV records _etcd-client-ssl._tcp.<domain>
                          and _etcd-client._tcp.<domain> (instead of --endpoints)
  --discovery-srv-name <name>  with --discovery-srv: _etcd-client-ssl-<name>._tcp.<domain>, ...
  --insecure-discovery=false  with --discovery-srv: ignore plain-http endpoints (default true)
  --cacert <file>         CA bundle to verify the servers' certificates (PEM)
  --cert <file>           client certificate (PEM), with --key
  --key <file>            client private key (PEM), with --cert
  --insecure-transport=false  use TLS even without --cacert/--cert/https:// (system CAs)
  --insecure-skip-tls-verify  accept the servers' certificates unverified (encrypted, not
                          authenticated: anyone in the path can pose as etcd); tests only
  --user <name:password>  authenticate as this etcd user
  --password <password>   the password, when --user has none (prefer ETCDCTL_PASSWORD)
  --auth-jwt-token <jwt>  authenticate with this JWT instead of --user (etcd's --auth-token jwt)
  --dial-timeout <dur>    how long to wait for a connection to an endpoint (default 2s)
  --command-timeout <dur> deadline of each request to etcd, retries included (default 10s)
  --keepalive-time <dur>  ping an idle connection this often (default 6s; etcd refuses pings
                          more often than its --grpc-keepalive-min-time, 5s by default)
  --keepalive-timeout <dur>  drop a connection whose ping is unanswered this long (default 3s)
  --debug                 print stack traces with errors
  -h, --help              show this help`;

type Spec = Record<string, { type: 'string' | 'boolean'; short?: string; multiple?: boolean }>;
/** A flag's value; a list for a flag given `multiple: true` (it may be repeated). */
type Values<O extends Spec> = {
  [K in keyof O]?: O[K] extends { multiple: true }
    ? O[K]['type'] extends 'string'
      ? string[]
      : boolean[]
    : O[K]['type'] extends 'string'
      ? string
      : boolean;
};

/**
 * parseArgs, with its errors turned into usage errors (exit 2) in our own words. An unknown option
 * gets the nearest known one ("did you mean"); with `runsCommand` (lock), a hint to put `--` before
 * a command whose options were read as ours.
 */
export function parse<O extends Spec>(
  args: string[],
  options: O,
  { runsCommand = false } = {},
): { values: Values<O>; positionals: string[] } {
  const bools = new Map<string, boolean>();
  // Not strict: our own words come from the tokens, never from parseArgs' messages.
  const { values, positionals, tokens } = parseArgs({
    args: attachDashValues(goBools(args, options, bools), options),
    options,
    allowPositionals: true,
    strict: false,
    tokens: true,
  });
  for (const t of tokens) {
    if (t.kind !== 'option') continue;
    const spec = Object.hasOwn(options, t.name) ? options[t.name] : undefined;
    if (!spec) throw new UsageError(unknownOption(t.rawName, options, runsCommand));
    // A short form is shown by its long name.
    const opt = `--${t.name}`;
    // "--ttl --json" is a forgotten value, not the value "--json" (a lone "-" is one: stdin).
    const optionLike = !t.inlineValue && t.value !== undefined && t.value.length > 1 && t.value.startsWith('-');
    if (spec.type === 'string' && (t.value === undefined || optionLike)) throw new UsageError(`${opt} needs a value`);
    if (spec.type === 'boolean' && t.value !== undefined) throw new UsageError(`${opt} takes no value`);
  }
  const parsed = { values: values as Values<O>, positionals };
  for (const [k, v] of bools) (parsed.values as Record<string, boolean>)[k] = v;
  // Commands that connect to etcd check the ETCDCTL_* variables against the flags.
  if (Object.hasOwn(options, 'endpoints')) checkEnvironment(parsed.values as Record<string, unknown>);
  return parsed;
}

/** "unknown option --tll; did you mean --ttl?", and for a command's own option, where `--` goes. */
function unknownOption(opt: string, options: Spec, runsCommand: boolean): string {
  let message = `unknown option ${opt}`;
  const word = opt.replace(/^--?/, '').replace(/=.*$/, '');
  const near = opt.startsWith('--') && word.length > 1 ? nearest(word, Object.keys(options)) : undefined;
  if (near) return `${message}; did you mean --${near}?`;
  if (runsCommand) {
    message += `; if it is meant for the command to run, put -- before the command: lock <name> [options] -- <command> ${opt} ...`;
  }
  return message;
}

/** Go's strconv.ParseBool, which etcdctl uses for its boolean flags and variables. */
export function parseGoBool(raw: string, what: string): boolean {
  if (/^(1|t|T|TRUE|true|True)$/.test(raw)) return true;
  if (/^(0|f|F|FALSE|false|False)$/.test(raw)) return false;
  throw new UsageError(`${what} must be true or false, got "${raw}"`);
}

/** Takes `--flag=true|false` of GO_BOOLS out of `args` into `into`; `--flag` alone stays (true). */
function goBools(args: string[], options: Spec, into: Map<string, boolean>): string[] {
  const out: string[] = [];
  for (let i = 0; i < args.length; i++) {
    const arg = args[i]!;
    if (arg === '--') {
      out.push(...args.slice(i));
      break;
    }
    const m = /^--([^=]+)=(.*)$/s.exec(arg);
    if (m && GO_BOOLS.has(m[1]!) && Object.hasOwn(options, m[1]!)) into.set(m[1]!, parseGoBool(m[2]!, `--${m[1]}`));
    else out.push(arg);
  }
  return out;
}

/** ETCDCTL_<NAME> for a flag: etcdctl's rule (upper case, dashes become underscores). */
export function envName(flag: string): string {
  return `ETCDCTL_${flag.toUpperCase().replace(/-/g, '_')}`;
}

/** etcdctl's global flags and variables that we know but do not apply: each gets a warning. */
const UNSUPPORTED: Record<string, string> = {
  ETCDCTL_WRITE_OUT: "etcdctl's --write-out (use --json where a command has it)",
  ETCDCTL_HEX: "etcdctl's --hex",
  ETCDCTL_MAX_REQUEST_BYTES: "etcdctl's --max-request-bytes",
  ETCDCTL_MAX_RECV_BYTES: "etcdctl's --max-recv-bytes",
};

let environmentChecked = false;

/**
 * The flags against the ETCDCTL_* variables, as etcdctl checks them (its pkg/flags
 * SetPflagsFromEnv): a variable set (even empty) for a flag also given on the command line is
 * refused; a variable of etcdctl's that we do not apply, or do not know, gets a warning line.
 */
function checkEnvironment(values: Record<string, unknown>): void {
  for (const flag of Object.keys(COMMON)) {
    if (flag === 'help' || values[flag] === undefined) continue;
    const name = envName(flag);
    if (process.env[name] !== undefined) {
      throw new UsageError(`--${flag} and ${name} are both set; unset the variable or drop the flag (etcdctl refuses this too)`);
    }
  }
  if (environmentChecked) return;
  environmentChecked = true;
  const ours = new Set(
    Object.keys(COMMON)
      .filter((f) => f !== 'help')
      .map(envName),
  );
  for (const name of Object.keys(process.env).sort()) {
    if (!name.startsWith('ETCDCTL_') || ours.has(name)) continue;
    const value = process.env[name]!;
    if (name === 'ETCDCTL_API') {
      if (value !== '' && value !== '3') warn(`ETCDCTL_API=${value} ignored: etcd-concurrency speaks only etcd's v3 API`);
    } else if (UNSUPPORTED[name]) {
      warn(`${name} ignored: etcd-concurrency has no equivalent of ${UNSUPPORTED[name]}`);
    } else {
      warn(`unrecognized environment variable ${name} ignored`);
    }
  }
  if (process.env.ETCDCTL_DEBUG && parseGoBool(process.env.ETCDCTL_DEBUG, 'ETCDCTL_DEBUG')) setDebug(true);
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
    if (
      name === undefined ||
      !Object.hasOwn(options, name) ||
      options[name]!.type !== 'string' ||
      next === undefined ||
      !next.startsWith('-') ||
      next === '-'
    ) {
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

/**
 * A lock or election name, checked before anything is sent. Leading or trailing white space is
 * refused (a quoting slip, and a different key); white space inside and a leading `/` are allowed,
 * as etcdctl allows them, with a warning: keys are not paths, `/jobs/x` and `jobs/x` are two names.
 */
export function nameArg(name: string | undefined, what: string): string {
  if (name === undefined) throw new UsageError(`missing the ${what}`);
  try {
    validateName(name, what);
  } catch (err) {
    throw new UsageError((err as Error).message);
  }
  if (name.trim() !== name)
    throw new UsageError(`${what} ${JSON.stringify(name)} starts or ends with white space; drop it (it would be part of the key)`);
  if (/\s/.test(name)) warn(`${what} ${JSON.stringify(name)} contains white space: every participant must quote it the same way`);
  if (name.startsWith('/'))
    warn(`${what} "${name}" starts with "/": keys are not paths, so "${name}" and "${name.replace(/^\/+/, '')}" are different names`);
  return name;
}

/** etcd's smallest lease TTL with its default election timeout (1 s): 1.5 election timeouts, rounded up. */
export const MIN_TTL = 2;

/** A lease TTL in whole seconds (etcdctl's --ttl): `30`, or a duration such as `30s` or `2m`. */
export function ttlArg(raw: string | undefined, fallback: number): number {
  if (raw === undefined) return fallback;
  const m = /^(\d+)(s|m|h)?$/.exec(raw.trim());
  const n = m ? Number(m[1]) * { s: 1, m: 60, h: 3600 }[m[2] ?? 's']! : NaN;
  if (!Number.isSafeInteger(n) || n < 1 || n > MAX_TTL) {
    throw new UsageError(`--ttl must be a whole number of seconds from ${MIN_TTL} to ${MAX_TTL}, got "${raw}" (e.g. 30, 30s or 2m)`);
  }
  if (n < MIN_TTL) {
    // etcd grants at least its minimum TTL (1.5 election timeouts, rounded up: 2 s by default).
    throw new UsageError(
      `--ttl ${raw} is below etcd's minimum lease TTL, which etcd would silently use instead; use --ttl ${MIN_TTL} or more`,
    );
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

/** A duration as given, with its unit: `2` (seconds) reads `2s`. */
export function durationText(raw: string): string {
  return /^\d+(\.\d+)?$/.test(raw.trim()) ? `${raw.trim()}s` : raw.trim();
}

/** The connection flags as parsed (parse() with COMMON). */
export type ConnectionValues = {
  [K in Exclude<keyof typeof COMMON, 'help' | 'debug'>]?: (typeof COMMON)[K]['type'] extends 'string'
    ? string | undefined
    : boolean | undefined;
};

/** A flag's value, else its ETCDCTL_* variable's (an empty variable counts as unset, as in etcdctl). */
function setting(values: ConnectionValues, flag: keyof ConnectionValues): string | undefined {
  const v = values[flag];
  if (v !== undefined) return String(v);
  return process.env[envName(flag)] || undefined;
}

/** How to name a setting in a message: the flag, or the variable it came from. */
function settingName(values: ConnectionValues, flag: keyof ConnectionValues): string {
  return values[flag] === undefined && process.env[envName(flag)] ? envName(flag) : `--${flag}`;
}

function boolSetting(values: ConnectionValues, flag: keyof ConnectionValues, fallback: boolean): boolean {
  const v = values[flag];
  if (typeof v === 'boolean') return v;
  const env = process.env[envName(flag)];
  return env ? parseGoBool(env, envName(flag)) : fallback;
}

/** Whether the options ask for DNS SRV discovery, which only connectTo() can do. */
function discoveryDomain(values: ConnectionValues): string | undefined {
  return setting(values, 'discovery-srv');
}

/**
 * The Client the options and ETCDCTL_* variables describe. Never starts a server. With
 * --discovery-srv, use connectTo (the DNS lookup is asynchronous), unless `values.endpoints` is set.
 */
export function connect(values: ConnectionValues, telemetry: TelemetryOptions = {}): Client {
  if (values.endpoints === undefined && discoveryDomain(values) !== undefined) {
    throw new UsageError('--discovery-srv is not supported by this command; pass --endpoints');
  }
  const options: ClientOptions = {
    ...telemetry,
    endpoints: setting(values, 'endpoints') ?? '127.0.0.1:2379',
    dialTimeoutMs: durationArg(setting(values, 'dial-timeout') ?? '2s', settingName(values, 'dial-timeout')),
    callTimeoutMs: durationArg(setting(values, 'command-timeout') ?? '10s', settingName(values, 'command-timeout')),
  };
  const keepaliveTime = setting(values, 'keepalive-time');
  if (keepaliveTime !== undefined) options.keepaliveTimeMs = durationArg(keepaliveTime, settingName(values, 'keepalive-time'));
  const keepaliveTimeout = setting(values, 'keepalive-timeout');
  if (keepaliveTimeout !== undefined) options.keepaliveTimeoutMs = durationArg(keepaliveTimeout, settingName(values, 'keepalive-timeout'));
  const skipVerify = boolSetting(values, 'insecure-skip-tls-verify', false);
  const cacert = setting(values, 'cacert');
  const cert = setting(values, 'cert');
  const key = setting(values, 'key');
  if (cacert !== undefined || cert !== undefined || key !== undefined) {
    if ((cert === undefined) !== (key === undefined)) throw new UsageError('give --cert and --key together, or neither');
    options.tls = {};
    if (cacert !== undefined) options.tls.ca = readPem(cacert, '--cacert');
    if (cert !== undefined) options.tls.cert = readPem(cert, '--cert');
    if (key !== undefined) options.tls.key = readPem(key, '--key');
  } else if (!boolSetting(values, 'insecure-transport', true) || skipVerify) {
    // etcdctl's --insecure-transport=false: TLS with the system's CAs even on plain host:port endpoints.
    options.tls = {};
  }
  if (skipVerify) {
    options.tls!.insecureSkipVerify = true;
    warn("--insecure-skip-tls-verify: the servers' certificates are not verified; anyone in the path can pose as etcd");
  }
  const jwt = setting(values, 'auth-jwt-token');
  const user = setting(values, 'user');
  if (jwt !== undefined) {
    // As etcdctl: the token is used as is and wins over --user.
    if (user !== undefined) warn('--auth-jwt-token is used; --user is ignored (as etcdctl does)');
  } else if (user !== undefined) {
    // "name:password" as etcdctl, or the password apart; it is never printed.
    const colon = user.indexOf(':');
    const username = colon < 0 ? user : user.slice(0, colon);
    const password = colon < 0 ? setting(values, 'password') : user.slice(colon + 1);
    if (username === '') throw new UsageError('--user has no user name; use --user name:password');
    if (password === undefined) throw new UsageError('--user has no password; use --user name:password or set ETCDCTL_PASSWORD');
    options.auth = { username, password };
  }
  const client = new Client(options);
  if (jwt !== undefined) client.conn.tokens = new StaticToken(jwt);
  return client;
}

/**
 * --auth-jwt-token: a token etcd issued (with `--auth-token jwt`), sent as is. It cannot be renewed:
 * once etcd refuses it, the next call fails with a message saying so instead of retrying.
 */
class StaticToken {
  private refused = false;
  constructor(private readonly jwt: string) {}
  token(): string {
    if (this.refused) {
      throw new CliError(
        'etcd refused the --auth-jwt-token (invalid or expired); get a new token, or authenticate with --user',
        EXIT.error,
      );
    }
    return this.jwt;
  }
  invalidate(): void {
    this.refused = true;
  }
}

/** The SRV records etcdctl looks up: `_etcd-client[-ssl][-<name>]._tcp.<domain>` (etcd's client/pkg/srv). */
export function srvNames(domain: string, serviceName: string | undefined): { https: string; http: string } {
  const suffix = serviceName ? `-${serviceName}` : '';
  return { https: `_etcd-client-ssl${suffix}._tcp.${domain}`, http: `_etcd-client${suffix}._tcp.${domain}` };
}

/**
 * The endpoints in DNS for --discovery-srv, as etcdctl finds them: https:// from the -ssl records,
 * http:// from the others; an error only if both lookups fail. Without --insecure-discovery=false
 * both kinds are used; our client does not mix schemes, so https wins when both are found.
 */
export async function discoverEndpoints(domain: string, serviceName: string | undefined, insecure: boolean): Promise<string[]> {
  const names = srvNames(domain, serviceName);
  const lookup = (name: string): Promise<SrvRecord[] | Error> => dnsPromises.resolveSrv(name).catch((err: Error) => err);
  const [https, http] = await Promise.all([lookup(names.https), lookup(names.http)]);
  if (https instanceof Error && http instanceof Error) {
    throw new CliError(
      `--discovery-srv ${domain}: no etcd endpoints in DNS (${names.https}: ${dnsError(https)}; ${names.http}: ${dnsError(http)})`,
      EXIT.error,
    );
  }
  const url = (scheme: string, r: SrvRecord): string =>
    `${scheme}://${r.name.includes(':') ? `[${r.name}]` : r.name.replace(/\.$/, '')}:${r.port}`;
  const secure = https instanceof Error ? [] : https.map((r) => url('https', r));
  const plain = http instanceof Error ? [] : http.map((r) => url('http', r));
  if (!insecure) {
    for (const ep of plain) warn(`ignoring discovered insecure endpoint ${ep} (--insecure-discovery=false)`);
    return secure;
  }
  if (secure.length > 0 && plain.length > 0) {
    warn(`ignoring discovered insecure endpoints ${plain.join(', ')}: using the TLS ones found beside them`);
    return secure;
  }
  return [...secure, ...plain];
}

function dnsError(err: Error): string {
  return (err as NodeJS.ErrnoException).code ?? err.message;
}

/**
 * connect(), after finding the endpoints with --discovery-srv when asked (etcdctl: discovery wins
 * over --endpoints, unless it finds none). `telemetry` goes into the ClientOptions (--metrics).
 */
export async function connectTo(values: ConnectionValues, telemetry: TelemetryOptions = {}): Promise<Client> {
  const domain = discoveryDomain(values);
  if (domain === undefined) return connect(values, telemetry);
  const found = await discoverEndpoints(domain, setting(values, 'discovery-srv-name'), boolSetting(values, 'insecure-discovery', true));
  const fallback = setting(values, 'endpoints');
  if (found.length === 0 && fallback === undefined)
    throw new CliError(`--discovery-srv ${domain}: DNS lists no usable etcd endpoint`, EXIT.error);
  return connect({ ...values, endpoints: found.length > 0 ? found.join(',') : fallback }, telemetry);
}

function readPem(path: string, flag: string): Buffer {
  try {
    return readFileSync(path);
  } catch (err) {
    throw new CliError(`${flag}: cannot read ${path} (${(err as NodeJS.ErrnoException).code ?? (err as Error).message})`, EXIT.usage);
  }
}
