// Which etcd binary to run: an explicit path, a version from the cache that `npm run etcd --
// install` fills, or `etcd` on PATH. Resolution only looks; it never installs anything.
//
// The cache layout (<cache>/<full version>/{etcd,etcdctl}) and its location are also known to
// scripts/etcd.mjs; keep the two in step.

import { execFile } from 'node:child_process';
import { statSync, type Stats } from 'node:fs';
import { access, constants as fsConstants, readdir } from 'node:fs/promises';
import { homedir } from 'node:os';
import { delimiter, dirname, join } from 'node:path';
import { promisify } from 'node:util';

const execFileAsync = promisify(execFile);

/** The release lines this project tests against, oldest first. */
export const SUPPORTED_ETCD_LINES = ['3.4', '3.5', '3.6', '3.7'] as const;
const NEWEST_LINE = SUPPORTED_ETCD_LINES[SUPPORTED_ETCD_LINES.length - 1];

/** An etcd found on this machine. */
export interface EtcdInstall {
  /** Full version as `etcd --version` prints it, e.g. `3.7.3`. */
  version: string;
  /** Path of the `etcd` binary. */
  etcd: string;
  /** Path of the matching `etcdctl`, when one sits next to `etcd`. */
  etcdctl?: string;
  /** Where it was found. */
  source: 'explicit' | 'cache' | 'path';
}

/** What to resolve: the same fields as {@link StartEtcdOptions}. */
export interface ResolveEtcdOptions {
  /** `3.7` (newest cached 3.7.x) or `3.7.3`. Default: `ETCD_VERSION`, else the newest cached, else `etcd` on PATH. */
  version?: string;
  /** Use this binary; with `version` too, its version must match. `ETCD_VERSION` is then ignored. */
  etcdBinary?: string;
}

/** No etcd of the requested version (or none at all) on this machine. The message says how to get one. */
export class EtcdNotFoundError extends Error {
  static readonly code = 'ERR_ETCD_BINARY_NOT_FOUND';
  readonly code = EtcdNotFoundError.code;
  override readonly name = 'EtcdNotFoundError';
  /** The version asked for (`3.7`, `3.7.3`), or undefined when any would have done. */
  readonly requested: string | undefined;
  constructor(message: string, requested: string | undefined) {
    super(message);
    this.requested = requested;
  }
}

/** `etcdBinary` and `version` disagree, or a binary does not report a version. */
export class EtcdVersionError extends Error {
  static readonly code = 'ERR_ETCD_BINARY_VERSION';
  readonly code = EtcdVersionError.code;
  override readonly name = 'EtcdVersionError';
}

/** The binary cache: `ETCD_CACHE_DIR`, else `~/.cache/etcd-concurrency/etcd`. */
export function etcdCacheDir(): string {
  return process.env.ETCD_CACHE_DIR || join(homedir(), '.cache', 'etcd-concurrency', 'etcd');
}

/**
 * The cache (or a directory or binary in it) belongs to someone else, or others may write it: an
 * etcd planted there would run as this user. The message says what to change.
 */
export class EtcdCacheError extends Error {
  static readonly code = 'ERR_ETCD_CACHE_UNSAFE';
  readonly code = EtcdCacheError.code;
  override readonly name = 'EtcdCacheError';
}

/**
 * Checks that `path` (the cache, a version directory in it, or a binary there) belongs to this user
 * or to root and that neither its group nor others may write it, before anything in it is run.
 * Nothing to check where it does not exist, or where there are no uids (Windows).
 * @throws {@link EtcdCacheError}
 */
export function assertOwnCache(path: string): void {
  const uid = process.getuid?.();
  if (uid === undefined) return;
  let st: Stats;
  try {
    st = statSync(path);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return;
    throw err;
  }
  const fix = 'or set ETCD_CACHE_DIR to a directory of your own';
  if (st.uid !== uid && st.uid !== 0) {
    throw new EtcdCacheError(
      `etcd cache: ${path} belongs to uid ${st.uid}, not to you (uid ${uid}): an etcd put there by its owner would run as you; ` +
        `make it yours (chown), ${fix}`,
    );
  }
  const writers = st.mode & 0o002 ? 'others' : st.mode & 0o020 ? 'its group' : undefined;
  if (writers) {
    throw new EtcdCacheError(
      `etcd cache: ${path} is writable by ${writers}: anyone of them could put an etcd there that you would run; chmod go-w ${path}, ${fix}`,
    );
  }
}

/** Compare dotted versions numerically (`3.10.0` > `3.9.1`); a missing part counts as 0. */
export function compareEtcdVersions(a: string, b: string): number {
  const pa = a.split('.').map(Number);
  const pb = b.split('.').map(Number);
  for (let i = 0; i < Math.max(pa.length, pb.length); i++) {
    const d = (pa[i] ?? 0) - (pb[i] ?? 0);
    if (d !== 0) return d;
  }
  return 0;
}

/** True when `version` (e.g. `3.6.16`) is `min` (e.g. `3.6`) or later. */
export function etcdVersionAtLeast(version: string, min: string): boolean {
  return compareEtcdVersions(version, min) >= 0;
}

/** True when `version` is what `request` asks for: `3.7` matches any 3.7.x, `3.7.3` only itself. */
function matches(version: string, request: string): boolean {
  return version === request || version.startsWith(`${request}.`);
}

const VERSION_RE = /^\d+\.\d+(\.\d+)?$/;

/** `ETCD_VERSION` (empty counts as unset), validated. */
function requestedVersion(explicit: string | undefined): string | undefined {
  const request = explicit ?? (process.env.ETCD_VERSION?.trim() || undefined);
  if (request !== undefined && !VERSION_RE.test(request)) {
    const from = explicit !== undefined ? 'version' : 'ETCD_VERSION';
    throw new RangeError(`etcd: ${from} must look like 3.7 or 3.7.3, got "${request}"`);
  }
  return request;
}

async function isExecutable(path: string): Promise<boolean> {
  try {
    await access(path, fsConstants.X_OK);
    return true;
  } catch {
    return false;
  }
}

const versions = new Map<string, Promise<string>>();

/**
 * The version an etcd binary reports (`etcd --version`), read once per path.
 * @throws {@link EtcdVersionError} when it does not run or prints no version.
 */
export function etcdBinaryVersion(binary: string): Promise<string> {
  let v = versions.get(binary);
  if (!v) {
    v = (async () => {
      try {
        // ETCD_* variables would be read as flags (ETCD_VERSION is ignored with a warning).
        const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('ETCD_')));
        const { stdout } = await execFileAsync(binary, ['--version'], { env, timeout: 30_000 });
        const m = /etcd Version: (\d+\.\d+\.\d+)/.exec(stdout);
        if (!m) throw new Error(`unexpected output: ${stdout.slice(0, 200)}`);
        return m[1]!;
      } catch (err) {
        versions.delete(binary); // a later install may fix it
        throw new EtcdVersionError(`etcd: cannot read the version of ${binary}: ${(err as Error).message}`);
      }
    })();
    versions.set(binary, v);
  }
  return v;
}

/**
 * Cached installs, newest first.
 * @throws {@link EtcdCacheError} when the cache, or an install in it, is not safe to run from.
 */
export async function cachedEtcds(): Promise<EtcdInstall[]> {
  assertOwnCache(etcdCacheDir());
  let names: string[];
  try {
    names = await readdir(etcdCacheDir());
  } catch {
    return [];
  }
  const found: EtcdInstall[] = [];
  for (const name of names.filter((n) => /^\d+\.\d+\.\d+$/.test(n))) {
    const dir = join(etcdCacheDir(), name);
    const etcd = join(dir, 'etcd');
    const etcdctl = join(dir, 'etcdctl');
    for (const p of [dir, etcd, etcdctl]) assertOwnCache(p);
    // An unfinished install lives in a dot-dir and is renamed into place whole, so a named dir is complete.
    if (await isExecutable(etcd))
      found.push({ version: name, etcd, etcdctl: (await isExecutable(etcdctl)) ? etcdctl : undefined, source: 'cache' });
  }
  return found.sort((a, b) => compareEtcdVersions(b.version, a.version));
}

async function onPath(): Promise<string | undefined> {
  for (const dir of (process.env.PATH ?? '').split(delimiter)) {
    if (dir && (await isExecutable(join(dir, 'etcd')))) return join(dir, 'etcd');
  }
  return (await isExecutable('/usr/bin/etcd')) ? '/usr/bin/etcd' : undefined;
}

async function withEtcdctl(etcd: string, version: string, source: EtcdInstall['source']): Promise<EtcdInstall> {
  const etcdctl = join(dirname(etcd), 'etcdctl');
  return { version, etcd, etcdctl: (await isExecutable(etcdctl)) ? etcdctl : undefined, source };
}

function installHint(request: string | undefined): string {
  const line = request?.split('.').slice(0, 2).join('.') ?? NEWEST_LINE;
  if (!(SUPPORTED_ETCD_LINES as readonly string[]).includes(line)) {
    return (
      `${line} is not a line this project supports (${SUPPORTED_ETCD_LINES.join(', ')}): ask for one of them (e.g. \`dev --etcd ${NEWEST_LINE}\`), ` +
      'or, to run another etcd anyway, pass its path (`etcdBinary`, `dev --etcd-binary`) or copy it into the cache with ' +
      '`npx etcd-concurrency etcd add <dir>`.'
    );
  }
  return (
    `Get one with \`npx etcd-concurrency etcd install ${line}\` (\`npm run etcd -- install ${line}\` in this repository). ` +
    `Or install etcd${request ? ` ${request}` : ''} yourself (Debian/Ubuntu: apt-get install etcd-server etcd-client; macOS: brew install etcd) ` +
    `and put it on PATH, or pass its path (\`etcdBinary\`, \`dev --etcd-binary\`); the README's "Getting an etcd" lists every way.`
  );
}

/** What was found instead, each version once: `3.7.3, 3.4.23 (also on PATH at /usr/bin/etcd)`. */
function foundInstead(cached: readonly EtcdInstall[], path: string | undefined, pathVersion: string | undefined): string {
  const versions = cached.map((c) => c.version);
  if (path === undefined)
    return versions.length ? `found only ${versions.join(', ')}` : `${etcdCacheDir()} is empty and there is no etcd on PATH`;
  if (pathVersion !== undefined && versions.includes(pathVersion)) {
    return `found only ${versions.map((v) => (v === pathVersion ? `${v} (also on PATH at ${path})` : v)).join(', ')}`;
  }
  return `found only ${[...versions, `${pathVersion ?? 'an etcd that does not run'} at ${path}`].join(', ')}`;
}

/**
 * Find the etcd that {@link startEtcd} would run for these options, without starting it.
 *
 * Order: `etcdBinary`; else the requested version (`version`, else `ETCD_VERSION`) from the cache,
 * else from PATH when `etcd` there is that version; with no version asked for, the newest in the
 * cache, else `etcd` on PATH (or /usr/bin/etcd).
 *
 * @throws {@link EtcdNotFoundError} with what to install; {@link EtcdVersionError} when
 *   `etcdBinary` is not the requested `version`.
 */
export async function resolveEtcd(options: ResolveEtcdOptions = {}): Promise<EtcdInstall> {
  if (options.etcdBinary) {
    const version = await etcdBinaryVersion(options.etcdBinary);
    const request = options.version === undefined ? undefined : requestedVersion(options.version);
    if (request && !matches(version, request)) {
      throw new EtcdVersionError(`etcd: etcdBinary ${options.etcdBinary} is ${version}, but version ${request} was asked for`);
    }
    return withEtcdctl(options.etcdBinary, version, 'explicit');
  }
  const request = requestedVersion(options.version);
  const cached = await cachedEtcds();
  const hit = request ? cached.find((c) => matches(c.version, request)) : cached[0];
  if (hit) {
    // The directory name is the version the installer read; trust the binary, not the name.
    const actual = await etcdBinaryVersion(hit.etcd);
    if (actual !== hit.version) {
      throw new EtcdVersionError(
        `etcd: ${hit.etcd} reports ${actual}, not ${hit.version}; remove ${dirname(hit.etcd)} and install it again`,
      );
    }
    return hit;
  }

  const path = await onPath();
  const pathVersion = path ? await etcdBinaryVersion(path).catch(() => undefined) : undefined;
  if (path && pathVersion && (!request || matches(pathVersion, request))) return withEtcdctl(path, pathVersion, 'path');

  const seen = foundInstead(cached, path, pathVersion);
  throw new EtcdNotFoundError(
    request
      ? `etcd ${request} is not installed (${seen}). ${installHint(request)}`
      : `etcd: no etcd found (${seen}). ${installHint(undefined)}`,
    request,
  );
}

/**
 * The etcd version {@link startEtcd} would run with these options (e.g. `3.7.3`), without
 * starting anything: for tests that depend on the server version.
 *
 * @example
 * ```ts
 * const v = await etcdVersion(); // honours ETCD_VERSION and the cache, as startEtcd does
 * test('keys-only reads carry no lease', { skip: !etcdVersionAtLeast(v, '3.7') }, ...);
 * ```
 */
export async function etcdVersion(options: ResolveEtcdOptions = {}): Promise<string> {
  return (await resolveEtcd(options)).version;
}
