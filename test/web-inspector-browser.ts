// The web inspector's page in a real browser: Debian's chromium, headless through playwright-core,
// launched once per test file (browserForFile), and page-side waits that the page's CSP allows.
// Without a browser every browser test skips with the reason printed, or fails when CI is set
// (unless WEB_INSPECTOR_ALLOW_SKIP=1).
import { before, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { chromium, type Browser, type Page } from 'playwright-core';

const CHROMIUM = process.env.CHROMIUM_PATH || '/usr/bin/chromium';
/**
 * In CI (CI set, not "false" or "0") a browser test may not skip: "passes in CI" must mean it ran.
 * WEB_INSPECTOR_ALLOW_SKIP=1 is the explicit opt-out, for a CI machine known to have no browser.
 */
const MUST_RUN = !!process.env.CI && !/^(false|0)$/i.test(process.env.CI) && process.env.WEB_INSPECTOR_ALLOW_SKIP !== '1';

/** A hang guard for page waits on a loaded 2-core machine, not a timing assertion. */
const PAGE_WAIT_MS = 45_000;

let browser: Browser | undefined;
let skipReason: string | undefined;

/** Launches the browser before the file's tests, or records why it cannot (see needBrowser). */
export function browserForFile(): void {
  before(async () => {
    if (!existsSync(CHROMIUM)) skipReason = `no browser at ${CHROMIUM} (install Debian's chromium, or set CHROMIUM_PATH)`;
    else {
      try {
        browser = await chromium.launch({ executablePath: CHROMIUM, headless: true, args: ['--no-sandbox'] });
      } catch (err) {
        skipReason = `chromium at ${CHROMIUM} does not start: ${(err as Error).message.split('\n')[0]}`;
      }
    }
    if (skipReason)
      process.stderr.write(
        `web-inspector: ${MUST_RUN ? 'FAILING (CI; WEB_INSPECTOR_ALLOW_SKIP=1 to skip)' : 'skipping'} the browser tests: ${skipReason}\n`,
      );
  });
}

/** Closes the browser (for the file's `after`). */
export async function closeBrowser(): Promise<void> {
  await browser?.close();
}

/**
 * Skips the test, with the reason printed, when no browser can run; fails it instead in CI (see
 * MUST_RUN).
 */
export function needBrowser(t: TestContext): Browser | undefined {
  if (!browser) {
    const reason = skipReason ?? 'no browser';
    if (MUST_RUN)
      assert.fail(
        `no browser under CI=${process.env.CI}: ${reason}. Install chromium, or set WEB_INSPECTOR_ALLOW_SKIP=1 to let the browser tests skip`,
      );
    t.skip(reason);
  }
  return browser;
}

// ── the page ───────────────────────────────────────────────────────────────────────────────────

/**
 * Page-side helpers, as source text: evaluated in the page with every wait (functions passed to
 * playwright would be serialized from tsx's output, which may reference its helpers).
 */
const HELPERS = `
  var card = function (name) { return Array.from(document.querySelectorAll('.card')).find(function (c) { return c.dataset.name === name; }); };
  var rows = function (name) {
    var c = card(name);
    return c ? Array.from(c.querySelectorAll('tbody tr')).map(function (tr) {
      return { role: tr.dataset.role, token: tr.dataset.token, key: tr.dataset.key, label: tr.children[0].textContent, ttl: tr.children[3].textContent, text: tr.innerText };
    }) : [];
  };
  var timeline = function (name) {
    return Array.from(document.querySelectorAll('#timeline li')).filter(function (li) { return li.dataset.name === name; })
      .map(function (li) { return { type: li.dataset.type || li.className, token: li.dataset.token, text: li.innerText }; });
  };
  var text = function () { return document.body.innerText; };
`;

/**
 * Waits until `expr` (page-side, with HELPERS in scope) is truthy: checked at once, then at each
 * change of the page's DOM (a MutationObserver, in the page: the page renders every change it shows,
 * and its bars and time cells redraw several times a second); on failure says what and shows the
 * page. The wait runs through page.evaluate (the DevTools protocol), which the page's
 * Content-Security-Policy does not apply to, while waitForFunction would need eval.
 */
export async function until(page: Page, expr: string, what: string): Promise<void> {
  const r = await page.evaluate<{ ok: boolean; last?: string }>(`(function () { ${HELPERS};
    var last;
    var holds = function () {
      try { return !!(${expr}); } catch (err) { last = String((err && err.message) || err); return false; }
    };
    return new Promise(function (resolve) {
      if (holds()) return resolve({ ok: true });
      var timer;
      var mo = new MutationObserver(function () {
        if (!holds()) return;
        mo.disconnect();
        clearTimeout(timer);
        resolve({ ok: true });
      });
      mo.observe(document, { subtree: true, childList: true, attributes: true, characterData: true });
      timer = setTimeout(function () { mo.disconnect(); resolve({ ok: holds(), last: last }); }, ${PAGE_WAIT_MS});
    });
  })()`);
  if (r.ok) return;
  const body = await page.innerText('body').catch(() => '(page gone)');
  throw new Error(`the page never showed ${what}${r.last ? ` (${r.last.split('\n')[0]})` : ''}\n--- page ---\n${body}`);
}

export async function evaluate<T>(page: Page, expr: string): Promise<T> {
  return (await page.evaluate(`(function () { ${HELPERS}; return (${expr}); })()`)) as T;
}

export async function open(url: string): Promise<Page> {
  const page = await browser!.newPage({ viewport: { width: 1280, height: 900 } });
  const errors: string[] = [];
  page.on('pageerror', (e) => errors.push(e.message));
  page.on('console', (m) => {
    if (m.type() === 'error') errors.push(m.text());
  });
  (page as Page & { errors?: string[] }).errors = errors;
  await page.goto(url);
  await until(page, `document.querySelector('.status.live')`, 'the live status');
  return page;
}

/** The page raised no script error and no CSP violation. */
export function assertNoPageErrors(page: Page): void {
  assert.deepEqual((page as Page & { errors?: string[] }).errors, [], 'errors in the page');
}
