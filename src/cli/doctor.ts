// `etcd-concurrency doctor`: is this cluster, and this user, ready for locks? Checks every member's
// version and leader, measures the round trips locks depend on, checks what the user may do with a
// lease under a prefix, and recommends a TTL. Everything it writes goes under a scratch prefix and
// is deleted (and its lease revoked) before it exits.
import { readFileSync } from 'node:fs';
import type { ClientTls } from '../launcher/http.js';
import { DOCTOR_EXIT, diagnose } from './doctor/diagnose.js';
import { render } from './doctor/render.js';
import { COMMON, COMMON_HELP, connect, connectTo, envName, parse, parseGoBool, type ConnectionValues } from './options.js';
import { EXIT, print, printJson, UsageError } from './output.js';
import { Interrupts } from './signals.js';

export const DEFAULT_PREFIX = 'etcd-concurrency-doctor/';
const DEFAULT_SAMPLES = 5;
const MAX_SAMPLES = 100;

export const DOCTOR_HELP = `Usage: etcd-concurrency doctor [options]

Checks whether the cluster and this user are ready for locks, and prints one line per check:
  members         every member answers (Status on each; members from MemberList)
  versions        each member's etcd version: a warning for end-of-life 3.4 and for mixed versions
  leader          each member has a Raft leader, and they agree on it
  alarms          no member reports an alarm (NOSPACE, CORRUPT)
  round trips     a put, a linearizable read and a watch notification (median and worst of --samples)
  watch catch-up  whether a watch from the current revision waits for etcd's 100 ms catch-up loop
  auth            whether authentication is on, and as whom we checked
  lease           whether this user can grant a lease, attach a key under --prefix, renew the
                  lease and revoke it (etcd 3.4.42+, 3.5.28+, 3.6.9+ and 3.7 need put permission on
                  every attached key to renew); a refusal says what to grant
  ttl             a lease TTL recommendation from the measured latencies
  clock rate      not checked: etcd exposes no portable clock reading

Keys are written under <prefix><random>/ only, and deleted with their lease before doctor exits.

Options:
  --prefix <prefix>       where to write scratch keys: use the prefix your locks live under, to
                          check this user's permissions there (default ${DEFAULT_PREFIX})
  --samples <n>           round trips measured per kind, 1 to ${MAX_SAMPLES} (default ${DEFAULT_SAMPLES})
  --json                  print the whole report as one JSON line

${COMMON_HELP}

Exit status: 0 ready; ${DOCTOR_EXIT.warnings} ready with warnings; ${DOCTOR_EXIT.notReady} not ready (a check failed);
1 could not check at all (etcd unreachable, TLS or authentication failure); 2 bad usage;
130/143 interrupted (the scratch keys and lease are removed first).

Examples:
  etcd-concurrency doctor --endpoints 10.0.0.1:2379,10.0.0.2:2379,10.0.0.3:2379
  etcd-concurrency doctor --user app --prefix locks/ --json | jq .checks`;

export async function doctorCommand(args: string[]): Promise<number> {
  const { values, positionals } = parse(args, {
    ...COMMON,
    json: { type: 'boolean' },
    prefix: { type: 'string' },
    samples: { type: 'string' },
  });
  if (values.help) {
    print(DOCTOR_HELP);
    return EXIT.ok;
  }
  if (positionals.length > 0) throw new UsageError(`doctor takes no arguments, got "${positionals[0]}"`);
  const prefix = values.prefix ?? DEFAULT_PREFIX;
  if (prefix === '') throw new UsageError('--prefix must not be empty: doctor writes its scratch keys under it');
  const samples = samplesArg(values.samples);
  const user = setting(values, 'user');
  // With --auth-jwt-token (which wins over --user, as in etcdctl) the user name is in the token.
  const jwt = setting(values, 'auth-jwt-token') !== undefined;
  const username = user && !jwt ? user.split(':')[0]! : null;

  const interrupts = new Interrupts();
  const client = await connectTo(values);
  try {
    const report = await diagnose(client, {
      prefix,
      samples,
      username,
      authenticated: username !== null || jwt,
      signal: interrupts.signal,
      memberClient: (endpoint) => connect({ ...values, endpoints: endpoint }),
      tls: tlsFiles(values),
    });
    if (values.json) printJson(report);
    else for (const line of render(report)) print(line);
    return report.exitCode;
  } finally {
    interrupts.dispose();
    await client.close();
  }
}

function samplesArg(raw: string | undefined): number {
  if (raw === undefined) return DEFAULT_SAMPLES;
  const n = /^\d+$/.test(raw) ? Number(raw) : NaN;
  if (!Number.isSafeInteger(n) || n < 1 || n > MAX_SAMPLES)
    throw new UsageError(`--samples must be a whole number from 1 to ${MAX_SAMPLES}, got "${raw}"`);
  return n;
}

/** A connection flag's value, else its ETCDCTL_* variable's (empty counts as unset), as connect() reads it. */
function setting(values: ConnectionValues, flag: keyof ConnectionValues): string | undefined {
  const v = values[flag];
  return v !== undefined ? String(v) : process.env[envName(flag)] || undefined;
}

/**
 * The TLS material connect() uses, for the /version fallback: the files of --cacert, --cert and
 * --key; {} (the system's CAs) for --insecure-transport=false; undefined for plain HTTP.
 */
function tlsFiles(values: ConnectionValues): ClientTls | undefined {
  const files = { ca: setting(values, 'cacert'), cert: setting(values, 'cert'), key: setting(values, 'key') };
  if (files.ca === undefined && files.cert === undefined && files.key === undefined) {
    const insecure = setting(values, 'insecure-transport');
    return insecure !== undefined && !parseGoBool(insecure, '--insecure-transport') ? {} : undefined;
  }
  // connect() has read them already, so they are readable.
  return Object.fromEntries(Object.entries(files).flatMap(([k, f]) => (f === undefined ? [] : [[k, readFileSync(f)]])));
}
