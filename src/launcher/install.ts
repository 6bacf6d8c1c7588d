// Getting an etcd: fetch Debian's package or build a pinned release line from Go modules into the
// cache that resolveEtcd (binary.ts) reads. The one implementation behind `etcd-concurrency etcd`
// (for package users) and `npm run etcd` (scripts/etcd.mjs, for the repository and CI). Only these
// commands install anything; the library and startEtcd never do.

import { spawnSync } from 'node:child_process';
import {
  accessSync,
  chmodSync,
  chownSync,
  constants,
  copyFileSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { delimiter, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { assertOwnCache, compareEtcdVersions, EtcdCacheError, etcdCacheDir } from './binary.js';
export { etcdCacheDir } from './binary.js';
import { DebianMirrorError, debianMirror } from './sources.js';

/** The package root: dist/launcher/install.js and src/launcher/install.ts both sit two levels below it. */
const ROOT = fileURLToPath(new URL('../..', import.meta.url));

/** How one supported line is obtained. Debian's are pinned by upstream version (any Debian revision). */
export interface EtcdLineSpec {
  version: string;
  kind: 'deb' | 'go';
  /** Debian suites holding the pinned version (kind 'deb'). */
  suites?: string[];
  /** An older pin from other suites, used when `suites` no longer has `version`. */
  fallback?: { version: string; suites: string[] };
  /** The Go module directory under the package root (kind 'go'), e.g. `etcd/v3.7`. */
  module?: string;
  note: string;
}

/** The pinned versions, oldest first. */
export const ETCD_LINES: Readonly<Record<string, EtcdLineSpec>> = {
  '3.4': { version: '3.4.23', kind: 'deb', suites: ['bookworm'], note: "Debian bookworm's etcd-server/etcd-client" },
  // sid moves on; trixie (stable) keeps 3.5.16, the fallback when sid no longer has 3.5.30.
  '3.5': {
    version: '3.5.30',
    kind: 'deb',
    suites: ['sid'],
    fallback: { version: '3.5.16', suites: ['trixie'] },
    note: "Debian sid's etcd-server/etcd-client",
  },
  '3.6': { version: '3.6.16', kind: 'go', module: 'etcd/v3.6', note: 'built from Go modules (etcd/v3.6)' },
  '3.7': { version: '3.7.3', kind: 'go', module: 'etcd/v3.7', note: 'built from Go modules (etcd/v3.7)' },
};
export const LINES = Object.keys(ETCD_LINES);
/** The newest supported line. */
export const NEWEST = LINES[LINES.length - 1]!;

/** An install or a lookup failed; the message says why and what to do. */
export class EtcdInstallError extends Error {
  static readonly code: string = 'ERR_ETCD_INSTALL';
  readonly code: string = EtcdInstallError.code;
  override readonly name: string = 'EtcdInstallError';
}

/** The request itself is wrong (an unknown command or version, a missing argument): exit status 2. */
export class EtcdInstallUsageError extends EtcdInstallError {
  static override readonly code: string = 'ERR_ETCD_INSTALL_USAGE';
  override readonly code: string = EtcdInstallUsageError.code;
  override readonly name: string = 'EtcdInstallUsageError';
}

/** How to run the installer in the messages: `npm run etcd --` in the repository, `npx etcd-concurrency etcd` for a package user. */
let program = 'npx etcd-concurrency etcd';
/** What starts each line on stderr: `etcd` for `npm run etcd`, the program's name under the CLI. */
let logPrefix = 'etcd';
export function setInstallerName(name: string, prefix = 'etcd'): void {
  program = name;
  logPrefix = prefix;
}
export function installerName(): string {
  return program;
}

/** The installer's progress and errors, on stderr. */
export const log = (msg: string): void => void process.stderr.write(`${logPrefix}: ${msg}\n`);

function isExecutable(path: string): boolean {
  try {
    accessSync(path, constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

/** The first executable `name` on PATH. */
export function which(name: string): string | undefined {
  for (const dir of (process.env.PATH ?? '').split(delimiter)) {
    if (dir && isExecutable(join(dir, name))) return join(dir, name);
  }
  return undefined;
}

/** Runs a command; throws with the end of its output on failure. */
function run(cmd: string, args: string[], opts: { cwd?: string; env?: NodeJS.ProcessEnv } = {}): string {
  const r = spawnSync(cmd, args, { cwd: opts.cwd, env: opts.env ?? process.env, encoding: 'utf8', stdio: 'pipe', maxBuffer: 64 << 20 });
  if (r.error) throw new EtcdInstallError(`${cmd} ${args.join(' ')}: ${r.error.message}`);
  if (r.status !== 0) {
    const out = `${r.stdout ?? ''}${r.stderr ?? ''}`.trim().split('\n').slice(-30).join('\n');
    throw new EtcdInstallError(`${cmd} ${args.join(' ')} failed (exit ${r.status})${out ? `:\n${out}` : ''}`);
  }
  return r.stdout ?? '';
}

/** ETCD_* variables are read as etcd flags; keep the caller's (e.g. ETCD_VERSION) away from it. */
function withoutEtcdEnv(): NodeJS.ProcessEnv {
  return Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('ETCD_')));
}

/** The version an etcd binary reports (`etcd Version: 3.4.23`), or undefined if it does not run. */
export function binaryVersion(etcd: string): string | undefined {
  const r = spawnSync(etcd, ['--version'], { encoding: 'utf8', env: withoutEtcdEnv() });
  return /etcd Version: (\d+\.\d+\.\d+)/.exec(r.stdout ?? '')?.[1];
}

/** The line (`3.7`) of a request such as `3.7` or `3.7.3`, if it is one installed here. */
export function lineOf(request: string | undefined): string {
  const m = /^(\d+\.\d+)(\.\d+)?$/.exec(String(request ?? ''));
  if (!m || !ETCD_LINES[m[1]!])
    throw new EtcdInstallUsageError(`unknown etcd version "${request}"; supported: ${LINES.join(', ')} (or "all")`);
  return m[1]!;
}

export interface CachedEtcd {
  version: string;
  dir: string;
}

/** Cached installs, newest first; the cache and each install in it checked first (assertOwnCache). */
export function cached(): CachedEtcd[] {
  let names: string[];
  try {
    names = readdirSync(trustedCache());
  } catch (err) {
    if (err instanceof EtcdInstallError) throw err;
    return [];
  }
  return names
    .filter((n) => /^\d+\.\d+\.\d+$/.test(n))
    .map((version) => ({ version, dir: join(etcdCacheDir(), version) }))
    .filter((e) => isExecutable(join(e.dir, 'etcd')) && isExecutable(join(e.dir, 'etcdctl')))
    .map((e) => {
      for (const p of [e.dir, join(e.dir, 'etcd'), join(e.dir, 'etcdctl')]) trusted(p);
      return e;
    })
    .sort((a, b) => compareEtcdVersions(b.version, a.version));
}

/** assertOwnCache, its refusal as the installer's error. */
function trusted(path: string): void {
  try {
    assertOwnCache(path);
  } catch (err) {
    if (err instanceof EtcdCacheError) throw new EtcdInstallError(err.message, { cause: err });
    throw err;
  }
}

/** The cache directory, checked: someone else's, or one others may write, is refused. */
function trustedCache(): string {
  trusted(etcdCacheDir());
  return etcdCacheDir();
}

/** The cached install for `request` (a line like 3.7, a full version like 3.7.3, or "newest"). */
export function findCached(request?: string): CachedEtcd | undefined {
  const all = cached();
  if (request === undefined || request === 'newest') return all[0];
  if (/^\d+\.\d+\.\d+$/.test(request)) return all.find((e) => e.version === request);
  return all.find((e) => e.version.startsWith(`${request}.`));
}

/** Moves a filled temp dir into place; if another process won the race, keeps theirs. */
function publish(tmp: string, version: string): string {
  const dest = join(etcdCacheDir(), version);
  try {
    renameSync(tmp, dest);
  } catch (err) {
    rmSync(tmp, { recursive: true, force: true });
    const code = (err as NodeJS.ErrnoException).code;
    if (!(code === 'ENOTEMPTY' || code === 'EEXIST') || !isExecutable(join(dest, 'etcd'))) throw err;
  }
  return dest;
}

function newTempDir(version: string): string {
  // 0755 whatever the umask: a cache its group may write is refused (assertOwnCache).
  mkdirSync(etcdCacheDir(), { recursive: true, mode: 0o755 });
  const dir = mkdtempSync(join(trustedCache(), `.${version}.tmp-`));
  chmodSync(dir, 0o755); // mkdtemp's 0700 would hide a shared cache from other users
  return dir;
}

/**
 * Checks the binaries run here and report `version`; writes a note of where they came from. The
 * binaries are made 0755 whatever the umask or their source's mode: writable by us alone.
 */
function verify(dir: string, version: string, source: string): void {
  for (const b of ['etcd', 'etcdctl']) chmodSync(join(dir, b), 0o755);
  const got = binaryVersion(join(dir, 'etcd'));
  if (got !== version)
    throw new EtcdInstallError(`${join(dir, 'etcd')} reports ${got ?? 'nothing (does it run on this machine?)'}, expected ${version}`);
  run(join(dir, 'etcdctl'), ['version'], { env: { ...withoutEtcdEnv(), ETCDCTL_API: '3' } });
  writeFileSync(join(dir, 'SOURCE'), `${source}\n`);
}

/** What else a user can do, named in every "could not install" message. */
function otherWays(line: string): string {
  const v = ETCD_LINES[line]!.version;
  return (
    `Other ways: Debian/Ubuntu \`apt-get install etcd-server etcd-client\` (puts etcd on PATH); macOS \`brew install etcd\`; ` +
    `a container (the etcd project's image, see README "Getting an etcd"); or download etcd ${v} from the etcd project's ` +
    `GitHub releases and run \`${program} add <dir with etcd and etcdctl>\`, or pass \`dev --etcd-binary <path>\`.`
  );
}

// ---- Debian packages, with a private apt state -------------------------------------------------

const KEYRING = '/usr/share/keyrings/debian-archive-keyring.gpg';

/**
 * apt's options for a private state under `state`: our sources only, no other index, and the
 * archive's signatures required whatever this machine's apt configuration allows. As root, apt's
 * download workers run as its sandbox user (_apt), as in any apt run; not as root, apt cannot
 * switch users, and is told not to try (which fails under fakeroot).
 */
function aptOptions(state: string): string[] {
  return [
    '-o',
    'Acquire::AllowInsecureRepositories=false',
    '-o',
    'Acquire::AllowDowngradeToInsecureRepositories=false',
    '-o',
    'APT::Get::AllowUnauthenticated=false',
    '-o',
    `Dir::Etc::SourceList=${join(state, 'sources.list')}`,
    '-o',
    'Dir::Etc::SourceParts=/dev/null',
    '-o',
    `Dir::State::Lists=${join(state, 'lists')}`,
    '-o',
    `Dir::State::status=${join(state, 'status')}`,
    '-o',
    `Dir::Cache=${join(state, 'cache')}`,
    '-o',
    'Acquire::Languages=none',
    '-o',
    'Acquire::IndexTargets::deb::DEP-11::DefaultEnabled=false',
    '-o',
    'Acquire::IndexTargets::deb::DEP-11-icons::DefaultEnabled=false',
    ...(isRoot() ? [] : ['-o', 'APT::Sandbox::User=root']),
  ];
}

function isRoot(): boolean {
  return process.getuid?.() === 0;
}

/** The uid of apt's sandbox user (_apt), or undefined when there is none. */
function aptUid(): number | undefined {
  const r = spawnSync('id', ['-u', '_apt'], { encoding: 'utf8' });
  return r.status === 0 ? Number(r.stdout.trim()) : undefined;
}

function needDebTools(line: string): string {
  const missing = ['apt-get', 'apt-cache', 'dpkg-deb'].filter((t) => !which(t));
  if (missing.length || !existsSync(KEYRING)) {
    throw new EtcdInstallError(
      `etcd ${line} comes from Debian's .deb packages, which needs apt-get, apt-cache, dpkg-deb and ${KEYRING} ` +
        `(missing: ${[...missing, ...(existsSync(KEYRING) ? [] : ['debian-archive-keyring'])].join(', ')}). ` +
        `On Debian/Ubuntu: apt-get install apt dpkg debian-archive-keyring. ${otherWays(line)}`,
    );
  }
  let mirror: string | undefined;
  try {
    mirror = debianMirror();
  } catch (err) {
    if (err instanceof DebianMirrorError) throw new EtcdInstallError(err.message, { cause: err });
    throw err;
  }
  if (!mirror) {
    throw new EtcdInstallError(
      `etcd ${line} comes from Debian's .deb packages, but this machine's apt sources (/etc/apt/sources.list, ` +
        `/etc/apt/sources.list.d/) name no Debian archive; set ETCD_DEBIAN_MIRROR to one (its URL ending in /debian). ${otherWays(line)}`,
    );
  }
  return mirror;
}

/** Downloads and unpacks etcd-server and etcd-client `version` from one of `suites`. */
function fetchDebs(line: string, version: string, suites: string[]): string {
  const mirror = needDebTools(line);
  // apt's private state and downloads, where its sandbox user can reach them (a cache under a home
  // directory may be closed to it); apt hands its partial/ directories to that user itself.
  const work = mkdtempSync(join(tmpdir(), `etcd-concurrency-apt-${version}-`));
  try {
    chmodSync(work, 0o755);
    const state = join(work, 'apt');
    for (const d of ['lists/partial', 'cache/archives/partial']) mkdirSync(join(state, d), { recursive: true });
    writeFileSync(join(state, 'status'), '');
    writeFileSync(join(state, 'sources.list'), suites.map((s) => `deb [signed-by=${KEYRING}] ${mirror} ${s} main\n`).join(''));
    const opts = aptOptions(state);
    log(`reading Debian ${suites.join(', ')} package lists from ${mirror} (private apt state, system sources untouched)`);
    run('apt-get', [...opts, '-q', 'update']);
    // Any Debian revision of the pinned upstream version: rebuilds (+b1) do not change etcd.
    const available = run('apt-cache', [...opts, 'madison', 'etcd-server'])
      .split('\n')
      .map((l) => l.split('|')[1]?.trim())
      .filter((v): v is string => Boolean(v));
    const debVersion = available.find((v) => v.replace(/^\d+:/, '').startsWith(`${version}-`));
    if (!debVersion) {
      throw new EtcdInstallError(
        `Debian ${suites.join('/')} no longer has etcd-server ${version} (it has ${available.join(', ') || 'none'}); update the pin in src/launcher/install.ts`,
      );
    }
    const debs = join(work, 'debs');
    mkdirSync(debs);
    // `apt-get download` writes into its working directory: as root, its sandbox user must be able to.
    const sandbox = isRoot() ? aptUid() : undefined;
    if (sandbox !== undefined) chownSync(debs, sandbox, -1);
    log(`downloading etcd-server and etcd-client ${debVersion} from ${suites.join('/')}`);
    run('apt-get', [...opts, '-q', 'download', `etcd-server=${debVersion}`, `etcd-client=${debVersion}`], { cwd: debs });
    // apt checked the packages: from here on, only we may change them.
    if (sandbox !== undefined) chownSync(debs, 0, -1);
    const root = join(work, 'root');
    for (const f of readdirSync(debs).filter((f) => f.endsWith('.deb'))) run('dpkg-deb', ['-x', join(debs, f), root]);
    const tmp = newTempDir(version);
    for (const b of ['etcd', 'etcdctl']) {
      copyFileSync(join(root, 'usr', 'bin', b), join(tmp, b));
      chmodSync(join(tmp, b), 0o755);
    }
    verify(tmp, version, `Debian ${suites.join('/')} etcd-server/etcd-client ${debVersion}`);
    return publish(tmp, version);
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
}

/** Copies etcd + etcdctl of `version` that are already installed (e.g. Debian's in /usr/bin). */
function copyInstalled(version: string): string | undefined {
  for (const dir of ['/usr/bin', ...(process.env.PATH ?? '').split(delimiter)]) {
    const etcd = join(dir, 'etcd');
    if (!dir || !isExecutable(etcd) || !isExecutable(join(dir, 'etcdctl')) || binaryVersion(etcd) !== version) continue;
    const tmp = newTempDir(version);
    for (const b of ['etcd', 'etcdctl']) copyFileSync(join(dir, b), join(tmp, b));
    verify(tmp, version, `copied from ${dir}`);
    return publish(tmp, version);
  }
  return undefined;
}

// ---- Go builds -----------------------------------------------------------------------------------

/** Go from /usr/local/go first, so Debian's old golang-go (1.19) on PATH never shadows it. */
export function findGo(): { go: string; version: string }[] {
  const candidates = [...new Set(['/usr/local/go/bin/go', which('go')].filter((g): g is string => Boolean(g)))];
  const found: { go: string; version: string }[] = [];
  for (const go of candidates) {
    if (!isExecutable(go)) continue;
    const r = spawnSync(go, ['env', 'GOVERSION'], { encoding: 'utf8', env: { ...process.env, GOTOOLCHAIN: 'local' } });
    const v = /go(\d+\.\d+(?:\.\d+)?)/.exec(r.stdout ?? '')?.[1];
    if (v) found.push({ go, version: v });
  }
  return found;
}

/** The Go module directory of a line built from Go modules. */
export function moduleDir(line: string): string {
  return join(ROOT, ETCD_LINES[line]!.module!);
}

/** The Go toolchain that can build `dir`, or a message saying what is missing. */
export function goFor(dir: string): { go: string; error?: undefined } | { go?: undefined; error: string } {
  if (!existsSync(join(dir, 'go.mod'))) return { error: `its Go module is missing (${dir})` };
  const need = /^go (\d+\.\d+)/m.exec(readFileSync(join(dir, 'go.mod'), 'utf8'))?.[1] ?? '1.0';
  const found = findGo();
  const ok = found.find((g) => compareEtcdVersions(g.version, need) >= 0);
  if (ok) return { go: ok.go };
  const seen = found.length
    ? `found ${found.map((g) => `go${g.version} at ${g.go}`).join(', ')}`
    : 'no go found in /usr/local/go/bin or on PATH';
  return { error: `needs Go >= ${need} (${seen}); install Go from the Go project's downloads into /usr/local/go` };
}

function buildGo(line: string, version: string): string {
  const dir = moduleDir(line);
  const { go, error } = goFor(dir);
  if (error !== undefined) throw new EtcdInstallError(`etcd ${line} is built from Go modules and ${error}. ${otherWays(line)}`);
  const tmp = newTempDir(version);
  const started = performance.now();
  log(`building etcd ${version} with ${go} (the first build downloads modules from the Go module proxy; a minute or two)`);
  try {
    // -buildvcs=false: the module may sit in a git checkout whose state is not etcd's to stamp.
    run(go, ['build', '-trimpath', '-mod=readonly', '-buildvcs=false', '-o', `${tmp}/`, './etcd', './etcdctl'], {
      cwd: dir,
      // GOTOOLCHAIN=local: never fetch another toolchain behind our back; a user's GOFLAGS could
      // add -mod=mod and rewrite the committed go.sum.
      // GOWORK=off: a go.work (in GOWORK, or a directory above the package) could swap etcd's modules.
      env: { ...process.env, CGO_ENABLED: '0', GOTOOLCHAIN: 'local', GOFLAGS: '', GOWORK: 'off' },
    });
    verify(tmp, version, `go build of ${ETCD_LINES[line]!.module} (go.etcd.io/etcd/server/v3 and etcdctl/v3 v${version})`);
  } catch (err) {
    rmSync(tmp, { recursive: true, force: true });
    if (err instanceof EtcdInstallError && /proxy|dial tcp|lookup|i\/o timeout|no such host/.test(err.message)) {
      err.message += `\n(the build needs the Go module proxy (GOPROXY), or a module cache that already has etcd's modules). ${otherWays(line)}`;
    }
    throw err;
  }
  log(`built etcd ${version} in ${Math.round((performance.now() - started) / 1000)} s`);
  return publish(tmp, version);
}

// ---- commands ------------------------------------------------------------------------------------

const FULL = /^\d+\.\d+\.\d+$/;

/** Installs one line (3.4 ... 3.7) unless cached; returns its directory. */
export function install(request: string): string {
  const line = lineOf(request);
  const spec = ETCD_LINES[line]!;
  const pinned = [spec.version, spec.fallback?.version].filter((v): v is string => Boolean(v));
  if (FULL.test(request) && !pinned.includes(request)) {
    throw new EtcdInstallUsageError(
      `etcd ${request} is not pinned here: ${line} means ${pinned.join(' (or ')}${pinned.length > 1 ? ')' : ''}; ` +
        `install ${line}, or add your own build with: ${program} add <dir>`,
    );
  }
  // A full version asks for exactly that one (e.g. 3.5.16, the fallback); a line takes either.
  const exact = FULL.test(request) ? request : undefined;
  const hit = exact ? findCached(exact) : (findCached(spec.version) ?? (spec.fallback && findCached(spec.fallback.version)));
  if (hit) return hit.dir;
  const started = performance.now();
  let dir: string | undefined;
  if (spec.kind === 'go') dir = buildGo(line, spec.version);
  else if (exact && exact !== spec.version) dir = fetchDebs(line, spec.fallback!.version, spec.fallback!.suites);
  else {
    dir = copyInstalled(spec.version);
    if (!dir) {
      try {
        dir = fetchDebs(line, spec.version, spec.suites!);
      } catch (err) {
        if (!spec.fallback || exact) throw err;
        log(`${(err as Error).message.split('\n')[0]}; falling back to ${spec.fallback.version} from ${spec.fallback.suites.join('/')}`);
        dir = fetchDebs(line, spec.fallback.version, spec.fallback.suites);
      }
    }
  }
  log(`etcd ${line} ready in ${dir} (${((performance.now() - started) / 1000).toFixed(1)} s)`);
  return dir;
}

/** Copies a user-supplied etcd + etcdctl (e.g. from a release tarball) into the cache. */
export function add(dir: string): string {
  const etcd = join(dir, 'etcd');
  const version = isExecutable(etcd) ? binaryVersion(etcd) : undefined;
  if (!version) throw new EtcdInstallError(`${etcd} is missing or does not print a version`);
  if (!isExecutable(join(dir, 'etcdctl'))) throw new EtcdInstallError(`${join(dir, 'etcdctl')} is missing`);
  const existing = findCached(version);
  if (existing) return existing.dir;
  const tmp = newTempDir(version);
  for (const b of ['etcd', 'etcdctl']) copyFileSync(join(dir, b), join(tmp, b));
  verify(tmp, version, `added from ${resolve(dir)}`);
  return publish(tmp, version);
}

/** The cached directory of `request` (a line, a full version or "newest"). */
export function pathOf(request: string): string {
  if (request !== 'newest') lineOf(request);
  const hit = findCached(request);
  if (hit) return hit.dir;
  if (request === 'newest') throw new EtcdInstallError(`no etcd in ${etcdCacheDir()}; run: ${program} install ${NEWEST}`);
  throw new EtcdInstallError(`etcd ${request} is not installed in ${etcdCacheDir()}; run: ${program} install ${lineOf(request)}`);
}
