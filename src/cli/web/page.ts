// The web inspector's page: one HTML document and one style sheet, served as they are (no build
// step, nothing from a CDN), with the script modules beside this file.
import { readFileSync } from 'node:fs';

/** The page's script modules, beside this file (the build copies them into dist). */
export const PAGE_SCRIPTS = ['app.js', 'words.js'] as const;

const scripts = new Map<string, string>();

/** A script module of the page (one of PAGE_SCRIPTS), read once. */
export function pageScript(name: (typeof PAGE_SCRIPTS)[number]): string {
  let text = scripts.get(name);
  if (text === undefined) {
    text = readFileSync(new URL(`./${name}`, import.meta.url), 'utf8');
    scripts.set(name, text);
  }
  return text;
}

export const PAGE_HTML = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>etcd-concurrency inspector</title>
<link rel="icon" href="data:,">
<link rel="stylesheet" href="app.css">
</head>
<body>
<header>
  <h1>etcd-concurrency <span class="light">inspector</span></h1>
  <span id="prefix" class="prefix"></span>
  <span id="status" class="status connecting">connecting…</span>
</header>
<div id="notice" class="notice" hidden></div>
<main>
  <section id="entities" aria-label="Locks, semaphores, readers-writer locks and elections"></section>
  <aside>
    <h2>Timeline</h2>
    <p class="hint">Hand-overs and terms, newest first. Times are when the inspector saw them.</p>
    <ol id="timeline"></ol>
  </aside>
</main>
<script type="module" src="app.js"></script>
</body>
</html>
`;

export const PAGE_CSS = `
:root { --fg: #1d2330; --dim: #6b7385; --line: #e3e6ec; --bg: #f6f7f9; --card: #fff; --accent: #2f6fde;
  --ok: #1f9d55; --warn: #c27c0e; --bad: #d0342c; --mono: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; }
* { box-sizing: border-box; }
body { margin: 0; font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: var(--fg); background: var(--bg); }
header { display: flex; align-items: center; gap: 16px; padding: 12px 20px; background: var(--card); border-bottom: 1px solid var(--line); position: sticky; top: 0; z-index: 2; }
h1 { font-size: 17px; margin: 0; font-weight: 650; }
h1 .light { font-weight: 400; color: var(--dim); }
h2 { font-size: 14px; margin: 0 0 4px; }
.prefix { font-family: var(--mono); color: var(--dim); }
.status { margin-left: auto; padding: 3px 10px; border-radius: 12px; font-weight: 600; font-size: 12.5px; }
.status.live { background: #e4f5ea; color: var(--ok); }
.status.live::before { content: "● "; }
.status.down, .status.connecting { background: #fde8e7; color: var(--bad); }
.notice { margin: 12px 20px 0; padding: 10px 14px; border-radius: 6px; background: #fde8e7; color: var(--bad); font-weight: 600; }
main { display: grid; grid-template-columns: minmax(0, 1fr) 380px; gap: 18px; padding: 16px 20px; align-items: start; }
@media (max-width: 1000px) { main { grid-template-columns: 1fr; } }
aside { background: var(--card); border: 1px solid var(--line); border-radius: 8px; padding: 12px 14px; position: sticky; top: 64px; max-height: calc(100vh - 84px); overflow: auto; }
.hint { color: var(--dim); font-size: 12px; margin: 0 0 8px; }
.empty { color: var(--dim); padding: 24px; text-align: center; border: 1px dashed var(--line); border-radius: 8px; background: var(--card); }
.card { background: var(--card); border: 1px solid var(--line); border-radius: 8px; padding: 12px 14px; margin-bottom: 14px; }
.card.free { opacity: .75; }
.card .head { display: flex; align-items: baseline; gap: 10px; flex-wrap: wrap; }
.card .name { font-family: var(--mono); font-weight: 650; font-size: 14.5px; word-break: break-all; }
.badge { font-size: 11.5px; padding: 1px 8px; border-radius: 10px; background: #eef2fb; color: var(--accent); font-weight: 600; white-space: nowrap; }
.badge.election { background: #f3ecfb; color: #7b3fc4; }
.badge.lock-or-election { background: #f1f2f5; color: #4a5060; }
.badge.semaphore { background: #e9f6f6; color: #147a7a; }
.badge.rwlock { background: #fbf1e6; color: #a35d0b; }
.summary { color: var(--dim); }
.summary.vacant { color: var(--warn); font-weight: 600; }
table { border-collapse: collapse; width: 100%; margin-top: 8px; font-size: 13px; }
th { text-align: left; font-weight: 600; color: var(--dim); font-size: 11.5px; text-transform: uppercase; letter-spacing: .03em; padding: 4px 8px; border-bottom: 1px solid var(--line); }
td { padding: 4px 8px; border-bottom: 1px solid #f0f1f4; white-space: nowrap; }
td.mono { font-family: var(--mono); }
td.value { white-space: normal; word-break: break-all; font-family: var(--mono); color: var(--dim); }
tr.holder td { background: #f0f7ff; }
tr.holder td.role { color: var(--accent); font-weight: 700; }
tr.stray td { color: var(--dim); font-style: italic; }
td.role { font-weight: 600; }
.warn { color: var(--warn); font-weight: 600; }
.bad { color: var(--bad); font-weight: 600; }
.dim { color: var(--dim); }
button.more { margin-top: 6px; border: 1px solid var(--line); background: var(--bg); border-radius: 6px; padding: 3px 10px; cursor: pointer; font: inherit; font-size: 12.5px; }
.bar { position: relative; height: 14px; margin-top: 10px; background: repeating-linear-gradient(45deg, #f7f0e4, #f7f0e4 4px, #fbf7ef 4px, #fbf7ef 8px); border-radius: 3px; overflow: hidden; }
.bar .term { position: absolute; top: 0; bottom: 0; border-right: 2px solid #fff; }
.axis { display: flex; justify-content: space-between; color: var(--dim); font-size: 11px; }
#timeline { list-style: none; margin: 0; padding: 0; }
#timeline li { padding: 6px 0; border-bottom: 1px solid #f0f1f4; }
#timeline .when { font-family: var(--mono); color: var(--dim); font-size: 12px; margin-right: 6px; }
#timeline .what { font-family: var(--mono); font-size: 12.5px; word-break: break-all; }
#timeline .text { display: block; }
#timeline li.gap { color: var(--warn); font-weight: 600; }
#timeline li.acquired .text::before { content: "▶ "; color: var(--ok); }
#timeline li.released .text::before { content: "■ "; color: var(--dim); }
#timeline li.expired .text::before { content: "✖ "; color: var(--bad); }
#timeline li.detached .text::before { content: "✎ "; color: var(--warn); }
`;
