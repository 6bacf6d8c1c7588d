// The chaos run's linearizable operations, checked by Porcupine (github.com/anishathalye/porcupine,
// the checker of etcd's own robustness tests) through the small Go program in chaos/porcupine/. The
// binary is built with the Go toolchain once per source version and cached.
import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

const run = promisify(execFile);
const SOURCE = fileURLToPath(new URL('./porcupine/', import.meta.url));

/** One operation with its invoke and return times on the common clock (ms; Infinity: never returned). */
export interface LinearOp {
  client: number;
  call: number;
  ret: number;
  op: 'read' | 'inc' | 'write';
  value: number;
  /** Fenced register requests: the fencing token (decimal). */
  token?: string;
  /** Fenced register requests: accepted. */
  ok: boolean;
}

export interface LinearHistory {
  name: string;
  /** `counter`: reads and increments of the etcd counter; `fenced-register`: the fenced ledger. */
  model: 'counter' | 'fenced-register';
  ops: LinearOp[];
}

export interface PorcupineResult {
  name: string;
  model: string;
  operations: number;
  /** Porcupine's CheckResult: 'Ok', 'Illegal' or 'Unknown' (timed out). */
  result: string;
  /** The HTML visualisation, written beside the result JSON when the history is not linearizable. */
  visualization?: string;
}

function goBinary(): string {
  return existsSync('/usr/local/go/bin/go') ? '/usr/local/go/bin/go' : 'go';
}

/** Builds the checker (once per version of its sources) and returns the binary's path. */
export async function porcupineBinary(): Promise<string> {
  const hash = createHash('sha256');
  for (const f of ['go.mod', 'go.sum', 'main.go']) hash.update(await readFile(join(SOURCE, f)));
  const dir = join(
    process.env.XDG_CACHE_HOME ?? join(homedir(), '.cache'),
    'etcd-concurrency',
    'chaos-porcupine',
    hash.digest('hex').slice(0, 16),
  );
  const bin = join(dir, 'porcupine');
  if (existsSync(bin)) return bin;
  await mkdir(dir, { recursive: true });
  // The module (and Porcupine) come through the machine's own GOPROXY setting.
  await run(goBinary(), ['build', '-o', bin, '.'], { cwd: SOURCE, timeout: 300_000 });
  return bin;
}

/** Microseconds, integers; an operation that never returned ends after everything else. */
function toMicros(histories: LinearHistory[]): unknown {
  const end = Math.max(0, ...histories.flatMap((h) => h.ops.map((o) => o.ret)).filter(Number.isFinite)) + 1;
  const us = (ms: number): number => Math.round((Number.isFinite(ms) ? ms : end) * 1000);
  return {
    histories: histories.map((h) => ({ ...h, ops: h.ops.map((o) => ({ ...o, call: us(o.call), ret: Math.max(us(o.call), us(o.ret)) })) })),
  };
}

/**
 * Checks `histories` with Porcupine; writes the input beside `resultPath` and Porcupine's verdict in
 * it (and an HTML visualisation per history that is not linearizable, in the same directory).
 */
export async function checkLinearizable(histories: LinearHistory[], resultPath: string): Promise<PorcupineResult[]> {
  const bin = await porcupineBinary();
  const input = `${resultPath.replace(/\.json$/, '')}.input.json`;
  await writeFile(input, `${JSON.stringify(toMicros(histories))}\n`);
  try {
    await run(bin, [input, resultPath], { timeout: 600_000, maxBuffer: 1 << 20 });
  } catch (err) {
    // Exit 1: a history is not linearizable (the result says which); anything else is a failure to check.
    if ((err as { code?: unknown }).code !== 1) throw err;
  }
  return (JSON.parse(await readFile(resultPath, 'utf8')) as { results: PorcupineResult[] }).results;
}
