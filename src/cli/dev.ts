// `etcd-concurrency dev`: a throwaway local etcd for trying the other commands, until Ctrl-C.
import { startEtcd } from '../testing/index.js';
import { parse } from './options.js';
import { EXIT, print, printJson, UsageError } from './output.js';
import { firstAborted, Interrupts } from './signals.js';

export const DEV_HELP = `Usage: etcd-concurrency dev [options]

Starts a local etcd (the \`etcd\` binary must be installed) on free loopback ports with a fresh
temporary data directory, prints its endpoints and an \`export ETCDCTL_ENDPOINTS=...\` line for
other shells (etcdctl and etcd-concurrency both read it), and runs until interrupted (Ctrl-C or
SIGTERM). Then it stops etcd and deletes the data. Nothing else ever starts a server.

Options:
  --members <1|3>         cluster size (default 1); 3 lets you kill a member and watch failover
  --json                  print {"endpoints":[...],"dataDir":...} as one JSON line instead
  --debug                 print stack traces with errors
  -h, --help              show this help

Exit status: 0 after stopping cleanly on an interrupt; 2 bad usage; 1 etcd failed to start.

Example:
  etcd-concurrency dev --members 3`;

export async function devCommand(args: string[]): Promise<number> {
  const { values, positionals } = parse(args, {
    members: { type: 'string' },
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

  const interrupts = new Interrupts();
  // The members are unref'd children and signal handlers do not keep node alive: this timer does.
  const alive = setInterval(() => {}, 1 << 30);
  try {
    const etcd = await startEtcd({ members: Number(members) as 1 | 3 });
    try {
      const list = etcd.endpoints.join(',');
      if (values.json) printJson({ endpoints: etcd.endpoints, dataDir: etcd.dataDir });
      else {
        print(`etcd is running (${members} member${members === '1' ? '' : 's'}): ${list}`);
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
