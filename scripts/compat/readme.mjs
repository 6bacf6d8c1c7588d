// What a newcomer copies out of README.md: the tsconfig of "Setting up a project" (the first ```json
// block with compilerOptions) and the quick start (the first ```ts block after "## Quick start").
// scripts/compat/typescript.mjs compiles them with every TypeScript major; test/compat-readme.test.ts
// checks them without the network.

/** The body of every fenced block in `markdown` whose info string is `lang`, in order, with its offset. */
function blocks(markdown, lang) {
  const out = [];
  const re = new RegExp(`^\`\`\`${lang}\\n([\\s\\S]*?)^\`\`\`$`, 'gm');
  for (let m = re.exec(markdown); m; m = re.exec(markdown)) out.push({ at: m.index, body: m[1] });
  return out;
}

/**
 * The README's tsconfig: the first ```json block with `compilerOptions`, parsed, and its text.
 * Throws, naming what is missing, when there is none.
 */
export function setupTsconfig(markdown) {
  const box = blocks(markdown, 'json').find((b) => b.body.includes('"compilerOptions"'));
  if (!box) throw new Error('README.md has no ```json block with "compilerOptions" (the tsconfig of "Setting up a project")');
  return { text: box.body, json: JSON.parse(box.body) };
}

/** The README's quick start: the first ```ts block after the "## Quick start" heading. */
export function quickStart(markdown) {
  const heading = /^## Quick start$/m.exec(markdown);
  if (!heading) throw new Error('README.md has no "## Quick start" heading');
  const first = blocks(markdown, 'ts').find((b) => b.at > heading.index);
  if (!first) throw new Error('README.md has no ```ts block after "## Quick start"');
  return first.body;
}

/**
 * Where the README's tsconfig expects sources and puts output: `rootDir` (default: the project
 * directory) and `outDir`, so that the quick start goes to `<rootDir>/main.ts` and runs as
 * `<outDir>/main.js`, as the README's "Then `npx tsc && node dist/main.js`" says.
 */
export function layout(tsconfig) {
  const o = tsconfig.compilerOptions ?? {};
  return { rootDir: o.rootDir ?? '.', outDir: o.outDir ?? '.' };
}
