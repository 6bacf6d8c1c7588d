// The import graph of src/: every relative import (type-only ones too) between its files. Prints the
// circles and the imports that point up from client/; exits 1 if there is any. Used by
// test/import-graph.test.ts; run alone with `node scripts/import-graph.mjs [srcDir]`.
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

/** What client/ may import: itself, the generated protobuf code and the diagnostics hooks (plus packages). */
const CLIENT_MAY_IMPORT = [/^client\//, /^proto\//, /^diagnostics\.ts$/];

/** Every .ts file under `dir`, relative to it. */
function files(dir, root = dir) {
  return readdirSync(dir).flatMap((name) => {
    const p = join(dir, name);
    if (statSync(p).isDirectory()) return files(p, root);
    return p.endsWith('.ts') && !p.endsWith('.d.ts') ? [relative(root, p)] : [];
  });
}

/** The relative specifiers `text` imports or re-exports (static, dynamic, side-effect). */
function specifiers(text) {
  const code = text.replace(/\/\*[\s\S]*?\*\//g, '').replace(/^\s*\/\/.*$/gm, '');
  const out = [];
  for (const re of [
    /\b(?:import|export)\s[^;]*?\bfrom\s*['"]([^'"]+)['"]/g,
    /\bimport\s*\(\s*['"]([^'"]+)['"]\s*\)/g,
    /^\s*import\s*['"]([^'"]+)['"]/gm,
  ]) {
    for (const m of code.matchAll(re)) if (m[1].startsWith('.')) out.push(m[1]);
  }
  return out;
}

/** `{ graph, cycles, upward }` for the sources under `srcDir`. */
export function importGraph(srcDir) {
  const graph = new Map();
  for (const f of files(srcDir)) {
    const deps = new Set();
    for (const s of specifiers(readFileSync(join(srcDir, f), 'utf8'))) {
      const target = relative(srcDir, resolve(srcDir, dirname(f), s))
        .replace(/\.js$/, '.ts')
        .split('\\')
        .join('/');
      deps.add(target);
    }
    graph.set(f.split('\\').join('/'), deps);
  }
  const upward = [];
  for (const [f, deps] of graph) {
    if (!f.startsWith('client/')) continue;
    for (const d of deps) if (!CLIENT_MAY_IMPORT.some((re) => re.test(d))) upward.push(`${f} -> ${d}`);
  }
  return { graph, cycles: cycles(graph), upward };
}

/** The circles of `graph`: its strongly connected components of more than one file (or a file importing itself), Tarjan's. */
function cycles(graph) {
  let index = 0;
  const idx = new Map();
  const low = new Map();
  const stack = [];
  const on = new Set();
  const out = [];
  const visit = (v) => {
    idx.set(v, index);
    low.set(v, index++);
    stack.push(v);
    on.add(v);
    for (const w of graph.get(v) ?? []) {
      if (!graph.has(w)) continue;
      if (!idx.has(w)) {
        visit(w);
        low.set(v, Math.min(low.get(v), low.get(w)));
      } else if (on.has(w)) low.set(v, Math.min(low.get(v), idx.get(w)));
    }
    if (low.get(v) === idx.get(v)) {
      const scc = [];
      let w;
      do {
        w = stack.pop();
        on.delete(w);
        scc.push(w);
      } while (w !== v);
      if (scc.length > 1 || graph.get(v).has(v)) out.push(scc.sort());
    }
  };
  for (const v of graph.keys()) if (!idx.has(v)) visit(v);
  return out;
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const src = resolve(process.argv[2] ?? join(dirname(fileURLToPath(import.meta.url)), '..', 'src'));
  const { cycles: c, upward } = importGraph(src);
  for (const scc of c) console.log(`circle: ${scc.join(' <-> ')}`);
  for (const u of upward) console.log(`client/ imports upward: ${u}`);
  if (c.length === 0 && upward.length === 0) console.log('import graph: no circle, client/ imports nothing above it');
  process.exitCode = c.length > 0 || upward.length > 0 ? 1 : 0;
}
