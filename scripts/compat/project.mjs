// What the compat scripts share: the packed package, fresh projects that install it with npm (the
// registry is the one npm is configured with; nothing here names a host), and child processes
// with a time limit.
import { spawn } from 'node:child_process';
import { mkdir, mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

export const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');

/**
 * Runs `cmd` and resolves with its exit code and output, also when it fails. Past `timeoutMs` its
 * whole process group is killed (a runtime's own children with it) and `timedOut` is set.
 * `echo` copies the output to ours as it comes.
 */
export function run(cmd, args, { cwd = root, env = process.env, timeoutMs = 120_000, echo = false } = {}) {
  const started = performance.now();
  return new Promise((resolve) => {
    const child = spawn(cmd, args, { cwd, env, detached: true, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    let timedOut = false;
    child.stdout.on('data', (d) => {
      stdout += d;
      if (echo) process.stdout.write(d);
    });
    child.stderr.on('data', (d) => {
      stderr += d;
      if (echo) process.stderr.write(d);
    });
    const timer = setTimeout(() => {
      timedOut = true;
      try {
        process.kill(-child.pid, 'SIGKILL');
      } catch {}
    }, timeoutMs);
    const done = (code, error) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr: error ? `${stderr}${error.message}\n` : stderr, timedOut, ms: performance.now() - started });
    };
    child.once('error', (err) => done(127, err));
    child.once('close', (code, signal) => done(code ?? (signal ? 128 : 1)));
  });
}

/** `npm <args>` in `cwd`, quiet; throws with npm's output when it fails. */
export async function npm(args, cwd, timeoutMs = 300_000) {
  const r = await run('npm', [...args, '--no-audit', '--no-fund', '--loglevel=error'], { cwd, timeoutMs });
  if (r.code !== 0) throw new Error(`npm ${args.join(' ')} (in ${cwd}) exited ${r.code}:\n${r.stdout}${r.stderr}`);
  return r.stdout;
}

/** The registry npm is configured with, for tools that read their own variable (Deno: NPM_CONFIG_REGISTRY). */
export async function npmRegistry() {
  return (await npm(['config', 'get', 'registry'], root)).trim();
}

/** A new temporary directory; the scripts remove it unless told to keep it. */
export function tempDir(name) {
  return mkdtemp(path.join(tmpdir(), `etcd-concurrency-${name}-`));
}

/**
 * The package as npm publishes it: `npm pack` of this checkout (its prepack script cleans and
 * builds dist) into `dest`; resolves with the tarball's path.
 */
export async function pack(dest) {
  const out = await npm(['pack', '--json', '--pack-destination', dest], root);
  // npm prints the prepack script's output before the JSON.
  const report = JSON.parse(out.slice(out.indexOf('\n[') + 1));
  return path.join(dest, report[0].filename);
}

/** A fresh npm project in `dir`: what `npm init -y` writes, with `"type"` as given. */
export async function freshProject(dir, type) {
  await mkdir(dir, { recursive: true });
  await writeFile(
    path.join(dir, 'package.json'),
    `${JSON.stringify({ name: path.basename(dir), version: '1.0.0', private: true, type }, null, 2)}\n`,
  );
}

/**
 * Command-line options: `--keep` (leave the temporary projects for a look) and `--NAME VALUE` for
 * each NAME in `names`; anything else prints `usage` and exits 2.
 */
export function parseArgs(argv, names, usage) {
  const options = {};
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === '--help' || a === '-h') {
      process.stdout.write(usage);
      process.exit(0);
    }
    if (a === '--keep') options.keep = true;
    else if (a.startsWith('--') && names.includes(a.slice(2)) && i + 1 < argv.length) options[a.slice(2)] = argv[++i];
    else {
      process.stderr.write(`unexpected argument ${a}\n${usage}`);
      process.exit(2);
    }
  }
  return options;
}
