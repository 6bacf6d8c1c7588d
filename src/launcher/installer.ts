// The installer's commands (install, list, path, add, exec, help) over install.ts, as
// `etcd-concurrency etcd` and `npm run etcd` run them.
import { spawn } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { constants as osConstants } from 'node:os';
import { delimiter, join } from 'node:path';
import { nearest } from '../spelling.js';
import { etcdCacheDir } from './binary.js';
import {
  add,
  binaryVersion,
  cached,
  ETCD_LINES,
  EtcdInstallError,
  EtcdInstallUsageError,
  findCached,
  install,
  installerName,
  LINES,
  log,
  NEWEST,
  pathOf,
  which,
} from './install.js';

/** What is cached and what is not, one line per release line (newest first), then extras and PATH. */
export function listLines(): string[] {
  const have = cached();
  const out: string[] = [];
  for (const line of [...LINES].reverse()) {
    const spec = ETCD_LINES[line]!;
    const hit = have.find((e) => e.version.startsWith(`${line}.`));
    if (hit) {
      const source = existsSync(join(hit.dir, 'SOURCE')) ? readFileSync(join(hit.dir, 'SOURCE'), 'utf8').trim() : '';
      out.push(`${hit.version.padEnd(8)} ${hit.dir}${source ? `  (${source})` : ''}`);
    } else out.push(`${line.padEnd(8)} not installed: ${installerName()} install ${line}  (${spec.version}, ${spec.note})`);
  }
  for (const e of have.filter((e) => !ETCD_LINES[e.version.split('.').slice(0, 2).join('.')])) out.push(`${e.version.padEnd(8)} ${e.dir}`);
  const onPath = which('etcd');
  if (onPath) out.push(`PATH     ${onPath} reports ${binaryVersion(onPath) ?? 'no version'}`);
  return out;
}

/**
 * Runs a command with `request`'s directory first on PATH and ETCD_VERSION set to it, so the
 * harness, `etcdctl` and anything else that runs `etcd` agree on one version. `default` means
 * ETCD_VERSION if set, else the newest cached, else PATH as it is. Exits with the child.
 */
export function execWith(request: string, argv: string[]): void {
  let env = process.env;
  const wanted = request === 'default' ? process.env.ETCD_VERSION?.trim() || 'newest' : request;
  if (request === 'default' && wanted === 'newest' && !findCached('newest')) {
    const onPath = which('etcd');
    log(
      onPath
        ? `using etcd ${binaryVersion(onPath) ?? '(unknown version)'} from PATH (${onPath})`
        : `no etcd cached or on PATH; run: ${installerName()} install ${NEWEST}`,
    );
  } else {
    const dir = pathOf(wanted);
    const version = dir.split('/').pop()!;
    log(`using etcd ${version} from ${dir}`);
    env = { ...process.env, PATH: `${dir}${delimiter}${process.env.PATH ?? ''}`, ETCD_VERSION: version };
  }
  const child = spawn(argv[0]!, argv.slice(1), { stdio: 'inherit', env });
  for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) process.on(sig, () => child.kill(sig));
  child.on('error', (err) => {
    log(`${argv[0]}: ${err.message}`);
    process.exit(127);
  });
  child.on('exit', (code, signal) => process.exit(code ?? 128 + (signal ? osConstants.signals[signal] : 0)));
}

/** The installer's help, naming it as it was run. */
export function installerHelp(): string {
  return `Usage: ${installerName()} <command>

Gets an etcd for \`etcd-concurrency dev\`, startEtcd() and tests: Debian's package (3.4, 3.5) or a
build of the pinned release from Go modules (3.6, 3.7; needs Go), into a cache that they all read.

  install <${LINES.join('|')}|all>  fetch or build a pinned etcd into the cache; prints its directory
  list                          show what is cached and what is not
  path <version|newest>         print the cached directory of a version (3.7 or 3.7.3), or fail
  add <dir>                     copy an etcd + etcdctl you downloaded (any version) into the cache
  exec <version|newest|default> -- cmd
                                run cmd with that etcd first on PATH and ETCD_VERSION set
                                (default: ETCD_VERSION, else the newest cached, else PATH)

Pinned: ${LINES.map((l) => `${ETCD_LINES[l]!.version} (${ETCD_LINES[l]!.note})`).join('; ')}.
Debian packages come from the Debian archive named in this machine's apt sources (or ETCD_DEBIAN_MIRROR),
Go modules from the Go module proxy (GOPROXY).
Cache: ${etcdCacheDir()} (set ETCD_CACHE_DIR to move it).`;
}

/** The installer's commands, as `unknown command` lists them. */
const COMMANDS = ['install', 'list', 'path', 'add', 'exec'];

/**
 * Runs one installer command; returns the exit status, or undefined for `exec` (which exits with
 * its child). Errors of the installer become one message and status 1; a wrong request (unknown
 * command or version, missing argument) status 2, as the other commands' usage errors.
 */
export function installerMain(argv: string[], print: (line: string) => void = console.log): number | undefined {
  const [cmd, arg, ...rest] = argv;
  try {
    switch (cmd) {
      case 'install': {
        if (!arg) throw new EtcdInstallUsageError(`install needs a version: ${LINES.join(', ')} or all`);
        if (arg !== 'all') {
          print(install(arg));
          return 0;
        }
        const failed: string[] = [];
        for (const line of LINES) {
          try {
            print(install(line));
          } catch (err) {
            if (!(err instanceof EtcdInstallError)) throw err;
            failed.push(line);
            log(`${line}: ${err.message}`);
          }
        }
        if (failed.length) log(`could not install ${failed.join(', ')} (see above)`);
        return failed.length ? 1 : 0;
      }
      case 'path':
        print(pathOf(arg ?? 'newest'));
        return 0;
      case 'list':
        for (const l of listLines()) print(l);
        return 0;
      case 'add':
        if (!arg) throw new EtcdInstallUsageError('add needs a directory holding etcd and etcdctl');
        print(add(arg));
        return 0;
      case 'exec': {
        const cmdArgs = rest[0] === '--' ? rest.slice(1) : rest;
        if (!arg || cmdArgs.length === 0) throw new EtcdInstallUsageError('usage: exec <version|newest|default> -- command [args...]');
        execWith(arg, cmdArgs);
        return undefined;
      }
      case undefined:
        // As the other commands without one: the help on stderr, status 2.
        process.stderr.write(`${installerHelp()}\n`);
        return 2;
      case 'help':
      case '-h':
      case '--help':
        print(installerHelp());
        return 0;
      default: {
        const near = nearest(cmd, COMMANDS);
        throw new EtcdInstallUsageError(`unknown command "${cmd}"; ${near ? `did you mean ${near}?` : `commands: ${COMMANDS.join(', ')}`}`);
      }
    }
  } catch (err) {
    if (!(err instanceof EtcdInstallError)) throw err;
    if (err instanceof EtcdInstallUsageError) {
      log(`${err.message} (see --help)`);
      return 2;
    }
    log(err.message);
    return 1;
  }
}
