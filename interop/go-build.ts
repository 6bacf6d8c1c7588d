// Builds interop/go (a small program on etcd's own Go package go.etcd.io/etcd/client/v3/concurrency)
// once into a cache, for the tests (test/go-fleet.ts) and the benchmark (bench/go.ts).
import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import { access, mkdir, readdir, readFile, rename, rm } from 'node:fs/promises';
import { constants as fsConstants } from 'node:fs';
import { homedir } from 'node:os';
import { delimiter, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

const execFileAsync = promisify(execFile);

/** The Go module's directory. */
export const GO_INTEROP_DIR = fileURLToPath(new URL('./go/', import.meta.url));
/**
 * Where built binaries are kept, one directory per source hash: `GO_INTEROP_CACHE_DIR`, else next to
 * the etcd binary cache, `~/.cache/etcd-concurrency/go-interop` (it survives `npm ci`).
 */
export const GO_INTEROP_CACHE = process.env.GO_INTEROP_CACHE_DIR || join(homedir(), '.cache', 'etcd-concurrency', 'go-interop');

/** The Go the module needs (its go line, and go.etcd.io/etcd/client/v3 v3.6.16's). */
const NEED = [1, 26] as const;
const INSTALL_HINT =
  `Go >= ${NEED.join('.')} is needed to build interop/go (go.etcd.io/etcd/client/v3 requires it). ` +
  'Install it from https://go.dev/dl/ into /usr/local/go (tar -C /usr/local -xzf go1.26.*.linux-amd64.tar.gz), ' +
  "or set GO=/path/to/go. Debian bookworm's golang-go (1.19) is too old.";

export interface GoTool {
  path: string;
  version: string; // e.g. go1.26.8
}

function parseGoVersion(v: string): [number, number] | undefined {
  const m = /^go(\d+)\.(\d+)/.exec(v);
  return m ? [Number(m[1]), Number(m[2])] : undefined;
}

async function executable(p: string): Promise<boolean> {
  try {
    await access(p, fsConstants.X_OK);
    return true;
  } catch {
    return false;
  }
}

/** Finds a Go toolchain new enough: $GO, then /usr/local/go/bin/go, then every `go` on PATH. */
export async function findGo(): Promise<GoTool> {
  const candidates = [
    process.env.GO,
    '/usr/local/go/bin/go',
    ...(process.env.PATH ?? '')
      .split(delimiter)
      .filter(Boolean)
      .map((d) => join(d, 'go')),
  ];
  const seen: string[] = [];
  for (const path of candidates) {
    if (!path || !(await executable(path))) continue;
    let version: string;
    try {
      // GOTOOLCHAIN=local: report this binary's own version, never a downloaded one.
      version = (await execFileAsync(path, ['env', 'GOVERSION'], { env: { ...process.env, GOTOOLCHAIN: 'local' } })).stdout.trim();
    } catch {
      continue;
    }
    const v = parseGoVersion(version);
    seen.push(`${path} (${version || 'unknown version'})`);
    if (v && (v[0] > NEED[0] || (v[0] === NEED[0] && v[1] >= NEED[1]))) return { path, version };
  }
  throw new Error(`${INSTALL_HINT}${seen.length ? ` Found only: ${seen.join(', ')}.` : ' No go binary was found.'}`);
}

/** Hash of everything the build reads from the module, and the toolchain's version. */
async function sourceHash(go: GoTool): Promise<string> {
  const files = (await readdir(GO_INTEROP_DIR)).filter((f) => f === 'go.mod' || f === 'go.sum' || f.endsWith('.go')).sort();
  const h = createHash('sha256').update(`${go.version}\n`);
  for (const f of files)
    h.update(`${f}\n`)
      .update(await readFile(join(GO_INTEROP_DIR, f)))
      .update('\n');
  return h.digest('hex').slice(0, 16);
}

let built: Promise<string> | undefined;

/**
 * Builds interop/go once (per process, and across runs while the sources and the toolchain are
 * unchanged) and returns the binary's path. `CGO_ENABLED=0 go build -trimpath -mod=readonly`: the
 * module's go.mod and go.sum are the pins; the Go module proxy is used only to fetch what the local
 * module cache lacks.
 */
export function buildGoInterop(): Promise<string> {
  built ??= (async () => {
    const go = await findGo();
    const dir = join(GO_INTEROP_CACHE, await sourceHash(go));
    const bin = join(dir, 'go-interop');
    if (await executable(bin)) return bin;
    await mkdir(dir, { recursive: true });
    const tmp = `${bin}.${process.pid}.tmp`;
    try {
      await execFileAsync(go.path, ['build', '-trimpath', '-mod=readonly', '-o', tmp, '.'], {
        cwd: GO_INTEROP_DIR,
        env: { ...process.env, CGO_ENABLED: '0', GOTOOLCHAIN: 'local', GOFLAGS: '-buildvcs=false' },
        maxBuffer: 16 << 20,
        timeout: 15 * 60_000,
      });
    } catch (err) {
      await rm(tmp, { force: true });
      const e = err as { stderr?: string; message: string };
      throw new Error(`building interop/go with ${go.path} (${go.version}) failed: ${e.stderr?.trim() || e.message}`);
    }
    await rename(tmp, bin); // atomic: a concurrent build of the same hash yields the same binary
    return bin;
  })();
  built.catch(() => (built = undefined));
  return built;
}
