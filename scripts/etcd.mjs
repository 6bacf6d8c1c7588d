#!/usr/bin/env node
// `npm run etcd -- <command>`: fetch or build every supported etcd into a cache, so tests can pick
// one (startEtcd({ version }) / ETCD_VERSION). Nothing here touches the system's apt sources, and
// nothing in the library ever installs anything: installing belongs to this script alone.
//
// The cache layout (<cache>/<full version>/{etcd,etcdctl}) and its location are also known to
// src/launcher/binary.ts; keep the two in step.

import { spawn, spawnSync } from 'node:child_process';
import { accessSync, constants, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, renameSync, rmSync, copyFileSync, chmodSync, writeFileSync } from 'node:fs';
import { constants as osConstants, homedir } from 'node:os';
import { delimiter, dirname, join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..');

/**
 * The pinned versions. Debian's are pinned by upstream version; the Debian revision (e.g. -2, +b4)
 * may move with rebuilds and is whatever the suite has for that upstream version.
 */
export const VERSIONS = {
  '3.4': { version: '3.4.23', kind: 'deb', suites: ['bookworm'], note: "Debian bookworm's etcd-server/etcd-client" },
  // sid moves on; trixie (stable) keeps 3.5.16, the fallback when sid no longer has 3.5.30.
  '3.5': { version: '3.5.30', kind: 'deb', suites: ['sid'], fallback: { version: '3.5.16', suites: ['trixie'] }, note: "Debian sid's etcd-server/etcd-client" },
  '3.6': { version: '3.6.16', kind: 'go', module: 'etcd/v3.6', note: 'built from Go modules (etcd/v3.6)' },
  '3.7': { version: '3.7.3', kind: 'go', module: 'etcd/v3.7', note: 'built from Go modules (etcd/v3.7)' },
};
export const LINES = Object.keys(VERSIONS); // oldest first
const NEWEST = LINES[LINES.length - 1];

export class EtcdInstallError extends Error {}

/** `ETCD_CACHE_DIR`, else `~/.cache/etcd-concurrency/etcd`. */
export function cacheDir() {
  return process.env.ETCD_CACHE_DIR || join(homedir(), '.cache', 'etcd-concurrency', 'etcd');
}

const log = (msg) => process.stderr.write(`etcd: ${msg}\n`);

function isExecutable(path) {
  try {
    accessSync(path, constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

function which(name) {
  for (const dir of (process.env.PATH ?? '').split(delimiter)) {
    if (dir && isExecutable(join(dir, name))) return join(dir, name);
  }
  return undefined;
}

/** Run a command; throw with its output on failure. */
function run(cmd, args, { cwd, env, quiet = true } = {}) {
  const r = spawnSync(cmd, args, { cwd, env: env ?? process.env, encoding: 'utf8', stdio: quiet ? 'pipe' : 'inherit', maxBuffer: 64 << 20 });
  if (r.error) throw new EtcdInstallError(`${cmd} ${args.join(' ')}: ${r.error.message}`);
  if (r.status !== 0) {
    const out = `${r.stdout ?? ''}${r.stderr ?? ''}`.trim().split('\n').slice(-30).join('\n');
    throw new EtcdInstallError(`${cmd} ${args.join(' ')} failed (exit ${r.status})${out ? `:\n${out}` : ''}`);
  }
  return r.stdout ?? '';
}

/** The version an etcd binary reports (`etcd Version: 3.4.23`), or undefined if it does not run. */
export function binaryVersion(etcd) {
  const r = spawnSync(etcd, ['--version'], { encoding: 'utf8', env: withoutEtcdEnv() });
  return /etcd Version: (\d+\.\d+\.\d+)/.exec(r.stdout ?? '')?.[1];
}

/** ETCD_* variables are read as etcd flags; keep the caller's (e.g. ETCD_VERSION) away from it. */
function withoutEtcdEnv() {
  return Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('ETCD_')));
}

/** The line (`3.7`) of a request such as `3.7` or `3.7.3`, if it is one this script installs. */
export function lineOf(request) {
  const m = /^(\d+\.\d+)(\.\d+)?$/.exec(String(request ?? ''));
  const line = m && VERSIONS[m[1]];
  if (!line) throw new EtcdInstallError(`unknown etcd version "${request}"; supported: ${LINES.join(', ')} (or "all")`);
  return m[1];
}

/** Cached installs, newest first: [{ version, dir }]. */
export function cached() {
  let names = [];
  try {
    names = readdirSync(cacheDir());
  } catch {
    return [];
  }
  return names
    .filter((n) => /^\d+\.\d+\.\d+$/.test(n))
    .map((version) => ({ version, dir: join(cacheDir(), version) }))
    .filter((e) => isExecutable(join(e.dir, 'etcd')) && isExecutable(join(e.dir, 'etcdctl')))
    .sort((a, b) => compareVersions(b.version, a.version));
}

export function compareVersions(a, b) {
  const pa = a.split('.').map(Number);
  const pb = b.split('.').map(Number);
  for (let i = 0; i < 3; i++) if (pa[i] !== pb[i]) return (pa[i] ?? 0) - (pb[i] ?? 0);
  return 0;
}

/** The cached install for `request` (a line like 3.7, a full version like 3.7.3, or "newest"). */
export function findCached(request) {
  const all = cached();
  if (request === undefined || request === 'newest') return all[0];
  if (/^\d+\.\d+\.\d+$/.test(request)) return all.find((e) => e.version === request);
  return all.find((e) => e.version.startsWith(`${request}.`));
}

/** Move a filled temp dir into place; if another process won the race, keep theirs. */
function publish(tmp, version) {
  const dest = join(cacheDir(), version);
  try {
    renameSync(tmp, dest);
  } catch (err) {
    rmSync(tmp, { recursive: true, force: true });
    if (!(err.code === 'ENOTEMPTY' || err.code === 'EEXIST') || !isExecutable(join(dest, 'etcd'))) throw err;
  }
  return dest;
}

function newTempDir(version) {
  mkdirSync(cacheDir(), { recursive: true });
  const dir = mkdtempSync(join(cacheDir(), `.${version}.tmp-`));
  chmodSync(dir, 0o755); // mkdtemp's 0700 would hide a shared cache from other users
  return dir;
}

/** Check the binaries run here and report `version`; write a note of where they came from. */
function verify(dir, version, source) {
  const got = binaryVersion(join(dir, 'etcd'));
  if (got !== version) throw new EtcdInstallError(`${join(dir, 'etcd')} reports ${got ?? 'nothing (does it run on this machine?)'}, expected ${version}`);
  run(join(dir, 'etcdctl'), ['version'], { env: { ...withoutEtcdEnv(), ETCDCTL_API: '3' } });
  writeFileSync(join(dir, 'SOURCE'), `${source}\n`);
}

// ---- Debian packages, with a private apt state -------------------------------------------------

const KEYRING = '/usr/share/keyrings/debian-archive-keyring.gpg';
const MIRROR = process.env.ETCD_DEBIAN_MIRROR || 'http://deb.debian.org/debian';

function aptOptions(state) {
  return [
    '-o', `Dir::Etc::SourceList=${join(state, 'sources.list')}`,
    '-o', 'Dir::Etc::SourceParts=/dev/null',
    '-o', `Dir::State::Lists=${join(state, 'lists')}`,
    '-o', `Dir::State::status=${join(state, 'status')}`,
    '-o', `Dir::Cache=${join(state, 'cache')}`,
    '-o', 'Acquire::Languages=none',
    '-o', 'Acquire::IndexTargets::deb::DEP-11::DefaultEnabled=false',
    '-o', 'Acquire::IndexTargets::deb::DEP-11-icons::DefaultEnabled=false',
    // The _apt user cannot write into a private dir we own; download as ourselves.
    '-o', 'APT::Sandbox::User=root',
  ];
}

function needDebTools(line) {
  const missing = ['apt-get', 'apt-cache', 'dpkg-deb'].filter((t) => !which(t));
  if (missing.length || !existsSync(KEYRING)) {
    throw new EtcdInstallError(
      `etcd ${line} comes from Debian's .deb packages, which needs apt-get, apt-cache, dpkg-deb and ${KEYRING} ` +
        `(missing: ${[...missing, ...(existsSync(KEYRING) ? [] : ['debian-archive-keyring'])].join(', ')}). ` +
        `On Debian/Ubuntu: apt-get install apt dpkg debian-archive-keyring. Elsewhere, download etcd ${VERSIONS[line].version} ` +
        `from https://github.com/etcd-io/etcd/releases and run: npm run etcd -- add <dir with etcd and etcdctl>`,
    );
  }
}

/** Download and unpack etcd-server and etcd-client `version` from one of `suites`. */
function fetchDebs(line, version, suites) {
  needDebTools(line);
  const work = newTempDir(`${version}-apt`);
  try {
    const state = join(work, 'apt');
    for (const d of ['lists/partial', 'cache/archives/partial']) mkdirSync(join(state, d), { recursive: true });
    writeFileSync(join(state, 'status'), '');
    const source = suites.map((s) => `deb [signed-by=${KEYRING}] ${MIRROR} ${s} main\n`).join('');
    writeFileSync(join(state, 'sources.list'), source);
    const opts = aptOptions(state);
    log(`reading Debian ${suites.join(', ')} package lists (private apt state, system sources untouched)`);
    run('apt-get', [...opts, '-q', 'update']);
    // Any Debian revision of the pinned upstream version: rebuilds (+b1) do not change etcd.
    const available = run('apt-cache', [...opts, 'madison', 'etcd-server'])
      .split('\n')
      .map((l) => l.split('|')[1]?.trim())
      .filter(Boolean);
    const debVersion = available.find((v) => v.replace(/^\d+:/, '').startsWith(`${version}-`));
    if (!debVersion) {
      throw new EtcdInstallError(
        `Debian ${suites.join('/')} no longer has etcd-server ${version} (it has ${available.join(', ') || 'none'}); ` +
          `update the pin in scripts/etcd.mjs`,
      );
    }
    const debs = join(work, 'debs');
    mkdirSync(debs);
    log(`downloading etcd-server and etcd-client ${debVersion} from ${suites.join('/')}`);
    run('apt-get', [...opts, '-q', 'download', `etcd-server=${debVersion}`, `etcd-client=${debVersion}`], { cwd: debs });
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

/** Copy etcd + etcdctl of `version` that are already installed (e.g. Debian's in /usr/bin). */
function copyInstalled(version) {
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
export function findGo() {
  const candidates = [...new Set(['/usr/local/go/bin/go', which('go')].filter(Boolean))];
  const found = [];
  for (const go of candidates) {
    if (!isExecutable(go)) continue;
    const r = spawnSync(go, ['env', 'GOVERSION'], { encoding: 'utf8', env: { ...process.env, GOTOOLCHAIN: 'local' } });
    const v = /go(\d+\.\d+(?:\.\d+)?)/.exec(r.stdout ?? '')?.[1];
    if (v) found.push({ go, version: v });
  }
  return found;
}

function goLineOf(moduleDir) {
  return /^go (\d+\.\d+)/m.exec(readFileSync(join(moduleDir, 'go.mod'), 'utf8'))?.[1];
}

/** The Go toolchain that can build `moduleDir`, or a message saying what is missing. */
export function goFor(moduleDir) {
  const need = goLineOf(moduleDir);
  const found = findGo();
  const ok = found.find((g) => compareVersions(`${g.version}.0`.split('.').slice(0, 3).join('.'), `${need}.0`) >= 0);
  if (ok) return { go: ok.go };
  const seen = found.length ? `found ${found.map((g) => `go${g.version} at ${g.go}`).join(', ')}` : 'no go found in /usr/local/go/bin or on PATH';
  return { error: `needs Go >= ${need} (${seen}); install it from https://go.dev/dl/ into /usr/local/go` };
}

function buildGo(line, version, moduleRel) {
  const moduleDir = join(ROOT, moduleRel);
  const { go, error } = goFor(moduleDir);
  if (error) throw new EtcdInstallError(`etcd ${line} is built from Go modules and ${error}`);
  const tmp = newTempDir(version);
  const started = Date.now();
  log(`building etcd ${version} with ${go} (first build downloads modules from the Go proxy; about a minute or two)`);
  try {
    // -buildvcs=false: the module sits in our git checkout, and stamping its state needs a git
    // that trusts the checkout; the binaries report etcd's version, not ours.
    run(go, ['build', '-trimpath', '-mod=readonly', '-buildvcs=false', '-o', `${tmp}/`, './etcd', './etcdctl'], {
      cwd: moduleDir,
      // GOTOOLCHAIN=local: never fetch another toolchain behind our back; GOFLAGS from the user
      // could add -mod=mod and rewrite the committed go.sum.
      env: { ...process.env, CGO_ENABLED: '0', GOTOOLCHAIN: 'local', GOFLAGS: '' },
    });
    verify(tmp, version, `go build of ${moduleRel} (go.etcd.io/etcd/server/v3 and etcdctl/v3 v${version})`);
  } catch (err) {
    rmSync(tmp, { recursive: true, force: true });
    if (err instanceof EtcdInstallError && /proxy|dial tcp|lookup|i\/o timeout|no such host/.test(err.message)) {
      err.message += '\n(the build needs the Go module proxy, or a module cache that already has etcd\'s modules; see GOPROXY)';
    }
    throw err;
  }
  log(`built etcd ${version} in ${Math.round((Date.now() - started) / 1000)} s`);
  return publish(tmp, version);
}

// ---- commands ------------------------------------------------------------------------------------

/** Install one line (3.4 ... 3.7) unless cached; return its directory. */
export function install(request) {
  const line = lineOf(request);
  const spec = VERSIONS[line];
  const pinned = [spec.version, spec.fallback?.version].filter(Boolean);
  if (/^\d+\.\d+\.\d+$/.test(request) && !pinned.includes(request)) {
    throw new EtcdInstallError(`etcd ${request} is not pinned here: ${line} means ${pinned.join(' (or ')}${pinned.length > 1 ? ')' : ''}; ` +
      `install ${line}, or add your own build with: npm run etcd -- add <dir>`);
  }
  // A full version asks for exactly that one (e.g. 3.5.16, the fallback); a line takes either.
  const exact = /^\d+\.\d+\.\d+$/.test(request) ? request : undefined;
  const hit = exact ? findCached(exact) : (findCached(spec.version) ?? (spec.fallback && findCached(spec.fallback.version)));
  if (hit) return hit.dir;
  const started = Date.now();
  let dir;
  if (spec.kind === 'go') dir = buildGo(line, spec.version, spec.module);
  else if (exact && exact !== spec.version) dir = fetchDebs(line, spec.fallback.version, spec.fallback.suites);
  else {
    dir = copyInstalled(spec.version);
    if (!dir) {
      try {
        dir = fetchDebs(line, spec.version, spec.suites);
      } catch (err) {
        if (!spec.fallback || exact) throw err;
        log(`${err.message.split('\n')[0]}; falling back to ${spec.fallback.version} from ${spec.fallback.suites.join('/')}`);
        dir = fetchDebs(line, spec.fallback.version, spec.fallback.suites);
      }
    }
  }
  log(`etcd ${line} ready in ${dir} (${((Date.now() - started) / 1000).toFixed(1)} s)`);
  return dir;
}

/** Copy a user-supplied etcd + etcdctl (e.g. from a GitHub release tarball) into the cache. */
function add(dir) {
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

function pathOf(request) {
  if (request !== 'newest') lineOf(request);
  const hit = findCached(request);
  if (hit) return hit.dir;
  if (request === 'newest') throw new EtcdInstallError(`no etcd in ${cacheDir()}; run: npm run etcd -- install ${NEWEST}`);
  throw new EtcdInstallError(`etcd ${request} is not installed in ${cacheDir()}; run: npm run etcd -- install ${lineOf(request)}`);
}

function list() {
  const have = cached();
  for (const line of [...LINES].reverse()) {
    const spec = VERSIONS[line];
    const hit = have.find((e) => e.version.startsWith(`${line}.`));
    if (hit) {
      const source = existsSync(join(hit.dir, 'SOURCE')) ? readFileSync(join(hit.dir, 'SOURCE'), 'utf8').trim() : '';
      console.log(`${hit.version.padEnd(8)} ${hit.dir}${source ? `  (${source})` : ''}`);
    } else console.log(`${line.padEnd(8)} not installed: npm run etcd -- install ${line}  (${spec.version}, ${spec.note})`);
  }
  for (const e of have.filter((e) => !VERSIONS[e.version.split('.').slice(0, 2).join('.')])) console.log(`${e.version.padEnd(8)} ${e.dir}`);
  const onPath = which('etcd');
  if (onPath) console.log(`PATH     ${onPath} reports ${binaryVersion(onPath) ?? 'no version'}`);
}

/**
 * Run a command with `request`'s directory first on PATH and ETCD_VERSION set to it, so the
 * harness, `etcdctl` and anything else that runs `etcd` agree on one version. `default` means
 * ETCD_VERSION if set, else the newest cached, else PATH as it is.
 */
function exec(request, argv) {
  let env = process.env;
  const wanted = request === 'default' ? process.env.ETCD_VERSION?.trim() || 'newest' : request;
  if (request === 'default' && wanted === 'newest' && !findCached('newest')) {
    const onPath = which('etcd');
    log(onPath ? `using etcd ${binaryVersion(onPath) ?? '(unknown version)'} from PATH (${onPath})` : `no etcd cached or on PATH; run: npm run etcd -- install ${NEWEST}`);
  } else {
    const dir = pathOf(wanted);
    const version = dir.split('/').pop();
    log(`using etcd ${version} from ${dir}`);
    env = { ...process.env, PATH: `${dir}${delimiter}${process.env.PATH ?? ''}`, ETCD_VERSION: version };
  }
  const child = spawn(argv[0], argv.slice(1), { stdio: 'inherit', env });
  for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP']) process.on(sig, () => child.kill(sig));
  child.on('error', (err) => {
    log(`${argv[0]}: ${err.message}`);
    process.exit(127);
  });
  child.on('exit', (code, signal) => process.exit(code ?? 128 + (signal ? osConstants.signals[signal] : 0)));
}

const HELP = `Usage: npm run etcd -- <command>

  install <3.4|3.5|3.6|3.7|all>  fetch or build a pinned etcd into the cache; prints its directory
  path <version|newest>          print the cached directory of a version (3.7 or 3.7.3), or fail
  list                           show what is cached and what is not
  add <dir>                      copy an etcd + etcdctl you downloaded (any version) into the cache
  exec <version|newest|default> -- cmd
                                 run cmd with that etcd first on PATH and ETCD_VERSION set
                                 (default: ETCD_VERSION, else the newest cached, else PATH)

Pinned: ${LINES.map((l) => `${VERSIONS[l].version} (${VERSIONS[l].note})`).join('; ')}.
Cache: ${cacheDir()} (set ETCD_CACHE_DIR to move it).`;

function main(argv) {
  const [cmd, arg, ...rest] = argv;
  try {
    switch (cmd) {
      case 'install': {
        if (!arg) throw new EtcdInstallError(`install needs a version: ${LINES.join(', ')} or all`);
        if (arg !== 'all') {
          console.log(install(arg));
          return 0;
        }
        const failed = [];
        for (const line of LINES) {
          try {
            console.log(install(line));
          } catch (err) {
            failed.push(line);
            log(`${line}: ${err.message}`);
          }
        }
        if (failed.length) log(`could not install ${failed.join(', ')} (see above)`);
        return failed.length ? 1 : 0;
      }
      case 'path':
        console.log(pathOf(arg ?? 'newest'));
        return 0;
      case 'list':
        list();
        return 0;
      case 'add':
        if (!arg) throw new EtcdInstallError('add needs a directory holding etcd and etcdctl');
        console.log(add(arg));
        return 0;
      case 'exec': {
        const cmdArgs = rest[0] === '--' ? rest.slice(1) : rest;
        if (!arg || cmdArgs.length === 0) throw new EtcdInstallError('usage: exec <version|newest|default> -- command [args...]');
        exec(arg, cmdArgs);
        return undefined; // exits with the child
      }
      case undefined:
      case 'help':
      case '-h':
      case '--help':
        console.log(HELP);
        return cmd === undefined ? 2 : 0;
      default:
        throw new EtcdInstallError(`unknown command "${cmd}"\n${HELP}`);
    }
  } catch (err) {
    if (!(err instanceof EtcdInstallError)) throw err;
    log(err.message);
    return 1;
  }
}

if (process.argv[1] && import.meta.url === pathToFileURL(resolve(process.argv[1])).href) {
  const code = main(process.argv.slice(2));
  if (code !== undefined) process.exitCode = code;
}
