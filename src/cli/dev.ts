// `etcd-concurrency dev`: a throwaway local etcd for trying the other commands, until Ctrl-C.
import { EtcdPortError, startEtcd, type EtcdCluster, type StartEtcdOptions } from '../launcher/index.js';
import { parse } from './options.js';
import { EXIT, print, printJson, UsageError, warn } from './output.js';
import { firstAborted, Interrupts } from './signals.js';

export const DEV_HELP = `Usage: etcd-concurrency dev [options]

Starts a local etcd on 127.0.0.1:2379 (etcd's and the Client's default port; free loopback ports
when 2379 or the ports after it are taken, or from --base-port) with a fresh temporary data
directory, prints its version, its endpoints and an \`export ETCDCTL_ENDPOINTS=...\` line for other
shells (etcdctl and etcd-concurrency both read it), and runs until interrupted (Ctrl-C or SIGTERM).
Then it stops etcd and deletes the data. Nothing else ever starts a server.

Options:
  --members <1|3>         cluster size (default 1); 3 lets you kill a member and watch failover
  --etcd <version>        etcd version to run, e.g. 3.7 or 3.6.16, from the cache that
                          \`etcd-concurrency etcd install 3.7\` fills (default: ETCD_VERSION, else
                          the newest cached, else \`etcd\` on PATH)
  --etcd-binary <path>    run this etcd binary (from a package, Homebrew or a release download)
  --base-port <port>      fixed ports: member i uses <port>+2i for clients and <port>+2i+1 for
                          peers (default: 2379 when free, else free ports chosen by the system)
  --json                  print {"endpoints":[...],"dataDir":...,"version":...} as one JSON line instead
  --debug                 print stack traces with errors
  -h, --help              show this help

Exit status: 0 after stopping cleanly on an interrupt; 2 bad usage; 1 etcd failed to start.

Examples:
  etcd-concurrency dev --members 3
  etcd-concurrency dev --etcd 3.7 --base-port 23790
  etcd-concurrency dev --etcd-binary /usr/bin/etcd`;

/** etcd's own default port, which the Client and etcdctl use when given no endpoints. */
export const DEFAULT_CLIENT_PORT = 2379;

/** On 2379 (and the ports after it) when free, so the Client's and etcdctl's defaults reach it; else on free ports. */
async function onDefaultPort(options: StartEtcdOptions): Promise<EtcdCluster> {
  try {
    return await startEtcd({ ...options, basePort: DEFAULT_CLIENT_PORT });
  } catch (err) {
    if (!(err instanceof EtcdPortError)) throw err;
    const n = (options.members ?? 1) * 2;
    warn(
      `ports ${DEFAULT_CLIENT_PORT}-${DEFAULT_CLIENT_PORT + n - 1} are not all free on 127.0.0.1; using free ports instead (pass the endpoints below)`,
    );
    return startEtcd(options);
  }
}

export async function devCommand(args: string[]): Promise<number> {
  const { values, positionals } = parse(args, {
    members: { type: 'string' },
    etcd: { type: 'string' },
    'etcd-binary': { type: 'string' },
    'base-port': { type: 'string' },
    json: { type: 'boolean' },
    debug: { type: 'boolean' },
    help: { type: 'boolean', short: 'h' },
  });
  if (values.help) {
    print(DEV_HELP);
    return EXIT.ok;
  }
  if (positionals.length > 0) throw new UsageError(`unexpected argument "${positionals[0]}"`);
  const members = values.members ?? '1';
  if (members !== '1' && members !== '3') throw new UsageError(`--members must be 1 or 3, got "${members}"`);
  const version = values.etcd;
  if (version !== undefined && !/^\d+\.\d+(\.\d+)?$/.test(version))
    throw new UsageError(`--etcd must be a version such as 3.7 or 3.7.3, got "${version}"`);
  if (values['etcd-binary'] === '') throw new UsageError('--etcd-binary needs the path of an etcd binary');
  const basePortText = values['base-port'];
  const basePort = basePortText === undefined ? undefined : Number(basePortText);
  const maxBase = 65536 - Number(members) * 2;
  if (basePort !== undefined && !(/^\d+$/.test(basePortText!) && basePort >= 1 && basePort <= maxBase)) {
    throw new UsageError(`--base-port must be a port from 1 to ${maxBase}, got "${basePortText}"`);
  }

  const interrupts = new Interrupts();
  // The members are unref'd children and signal handlers do not keep node alive: this timer does.
  const alive = setInterval(() => {}, 1 << 30);
  try {
    const options: StartEtcdOptions = { members: Number(members) as 1 | 3, version, etcdBinary: values['etcd-binary'] };
    const etcd = basePort !== undefined ? await startEtcd({ ...options, basePort }) : await onDefaultPort(options);
    try {
      const list = etcd.endpoints.join(',');
      if (values.json) printJson({ endpoints: etcd.endpoints, dataDir: etcd.dataDir, version: etcd.version });
      else {
        print(`etcd ${etcd.version} is running (${members} member${members === '1' ? '' : 's'}): ${list}`);
        print(`export ETCDCTL_ENDPOINTS=${list}`);
        print(`data and logs in ${etcd.dataDir}; press Ctrl-C to stop etcd and delete them`);
      }
      await firstAborted(interrupts.signal);
    } finally {
      await etcd.stop();
    }
    return EXIT.ok;
  } finally {
    clearInterval(alive);
    interrupts.dispose();
  }
}
