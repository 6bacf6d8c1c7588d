// What every web inspector test file sets up: its etcd and CLI processes (etcdForCliFile), the
// browser when it drives the page (web-inspector-browser.ts), and the inspector started as a CLI child.
import type { Client } from '../src/index.js';
import type { EtcdCluster } from '../src/testing/index.js';
import { assertNoKeys, etcdForCliFile, killClis, runCli, type CliProc } from './helpers.js';
import { browserForFile, closeBrowser } from './web-inspector-browser.js';

/** The screenshot's scene lives under a short prefix, so that the picture reads well. */
export const SCENE = 'app/';

/** What {@link inspectorFile} gives a web inspector test file. */
export interface InspectorFile {
  /** Each test's own prefix under the file's root. */
  fresh(scope: string): string;
  /** Commands run under `lock -- cmd` whose lock process we SIGKILLed: they run on until killed. */
  readonly orphans: Set<number>;
  /**
   * A CLI child. It has ended once it exits, not once its pipes close: a command under `lock -- cmd`
   * whose lock process was SIGKILLed keeps the stdout pipe open.
   */
  start(args: string[], env?: NodeJS.ProcessEnv): CliProc;
  /** Starts the web inspector on `prefix` (on the file's etcd unless `ep`); resolves once it printed its URL. */
  inspector(prefix: string, extra?: string[], ep?: string, env?: NodeJS.ProcessEnv): Promise<{ proc: CliProc; url: string }>;
  /** The participant keys of `name`, oldest first, as etcd has them. */
  queueOf(name: string): Promise<{ key: string; token: string }[]>;
}

/**
 * A web inspector test file's etcd (handed to `ready`) and, with `browser`, the browser launched
 * before its tests. After them: the browser closed, CLI children ended (SIGTERM first: lock and
 * elect release their keys on it after a failed test; then SIGKILL), orphans killed, and nothing
 * left under {@link SCENE}.
 */
export function inspectorFile(
  root: string,
  ready: (etcd: EtcdCluster, client: Client) => void,
  options: { browser: boolean },
): InspectorFile {
  let client: Client | undefined;
  let endpoint: string | undefined;
  const orphans = new Set<number>();
  const fresh = etcdForCliFile(
    root,
    (e, c) => {
      client = c;
      endpoint = e.endpoints[0]!;
      ready(e, c);
    },
    {
      beforeChecks: async () => {
        if (options.browser) await closeBrowser();
        await killClis('SIGTERM', 15_000);
        for (const pid of orphans) {
          try {
            process.kill(pid, 'SIGKILL');
          } catch {
            // already gone
          }
        }
        await assertNoKeys(client!, SCENE);
      },
    },
  );
  if (options.browser) browserForFile();
  const start = (args: string[], env?: NodeJS.ProcessEnv): CliProc => runCli(args, { exitEvent: 'exit', env });
  return {
    fresh,
    orphans,
    start,
    async inspector(prefix, extra = [], ep = endpoint!, env) {
      const port = extra.includes('--listen') ? [] : ['--port', '0'];
      const proc = start(['inspect', '--web', prefix, ...port, '--endpoints', ep, ...extra], env);
      const m = await proc.match(/^inspector: (http:\/\/\S+)/);
      return { proc, url: m[1]! };
    },
    async queueOf(name) {
      const r = await client!.getPrefix(`${name}/`);
      return r.kvs
        .sort((a, b) => (a.createRevision < b.createRevision ? -1 : 1))
        .map((kv) => ({ key: kv.key.toString(), token: kv.createRevision.toString() }));
    },
  };
}
