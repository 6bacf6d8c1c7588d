// `etcd-concurrency dev`: a throwaway local etcd for trying the other commands, until Ctrl-C.
import { startEtcd } from '../launcher/index.js';
import { parse } from './options.js';
import { EXIT, print, printJson, UsageError } from './output.js';
import { firstAborted, Interrupts } from './signals.js';

export const DEV_HELP = `Usage: etcd-concurrency dev [options]

Starts a local etcd on free loopback ports (or from --base-port) with a fresh temporary data
directory, prints its version, its endpoints and an \`export ETCDCTL_ENDPOINTS=...\` line for other
shells (etcdctl and etcd-concurrency both read it), and runs until interrupted (Ctrl-C or SIGTERM).
Then it stops etcd and deletes the data. Nothing else ever starts a server.

Options:
  --members <1|3>         cluster size (default 1); 3 lets you kill a member and watch failover
  --etcd <version>        etcd version to run, e.g. 3.7 or 3.6.16, from the cache that
                          \`npm run etcd -- install 3.7\` fills (default: ETCD_VERSION, else the
                          newest cached, else \`etcd\` on PATH)
  --base-port <port>      fixed ports: member i uses <port>+2i for clients and <port>+2i+1 for
                          peers (default: free ports chosen by the system)
  --json                  print {"endpoints":[...],"dataDir":...,"version":...} as one JSON line instead
  --debug                 print stack traces with errors
  -h, --help              show this help

Exit status: 0 after stopping cleanly on an interrupt; 2 bad usage; 1 etcd failed to start.

Examples:
  etcd-concurrency dev --members 3
  etcd-concurrency dev --etcd 3.7 --base-port 23790`;

export async function devCommand(args: string[]): Promise<number> {
  const { values, positionals } = parse(args, {
    members: { type: 'string' },
    etcd: { type: 'string' },
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
  if (version !== undefined && !/^\d+\.\d+(\.\d+)?$/.test(version)) throw new UsageError(`--etcd must be a version such as 3.7 or 3.7.3, got "${version}"`);
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
    const etcd = await startEtcd({ members: Number(members) as 1 | 3, version, basePort });
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
