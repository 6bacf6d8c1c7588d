// Command lines per etcd version. 3.6 deprecated every `--experimental-*` flag (renamed, or turned
// into `--feature-gates`), and 3.7 removed them; 3.6 also removed `--enable-v2`. The flags the
// harness itself passes exist unchanged in 3.4 to 3.7; the rest is mapped or checked here.

import { etcdVersionAtLeast } from './binary.js';

/** What one member's command line is made of (the harness fills this in). */
export interface MemberFlagSettings {
  name: string;
  dataDir: string;
  clientUrl: string;
  peerUrl: string;
  initialCluster: string;
  clusterToken: string;
  heartbeatMs?: number;
  electionMs?: number;
  watchProgressNotifyIntervalMs?: number;
  tls?: { certFile: string; keyFile: string; trustedCaFile: string; clientCertAuth?: boolean };
  extraArgs?: string[];
}

/** A flag in `extraArgs` that the chosen etcd version does not have. */
export class EtcdFlagError extends Error {
  static readonly code = 'ERR_ETCD_FLAG';
  readonly code = EtcdFlagError.code;
  override readonly name = 'EtcdFlagError';
}

/** 3.6's replacements for the experimental flags it deprecated and 3.7 removed (from etcd 3.6.16's --help). */
const RENAMED: Record<string, string> = {
  'bootstrap-defrag-threshold-megabytes': '--bootstrap-defrag-threshold-megabytes',
  'compact-hash-check-enabled': '--feature-gates=CompactHashCheck=true',
  'compact-hash-check-time': '--compact-hash-check-time',
  'compaction-batch-limit': '--compaction-batch-limit',
  'compaction-sleep-interval': '--compaction-sleep-interval',
  'corrupt-check-time': '--corrupt-check-time',
  'distributed-tracing-address': '--distributed-tracing-address',
  'distributed-tracing-instance-id': '--distributed-tracing-instance-id',
  'distributed-tracing-sampling-rate': '--distributed-tracing-sampling-rate',
  'distributed-tracing-service-name': '--distributed-tracing-service-name',
  'downgrade-check-time': '--downgrade-check-time',
  'enable-distributed-tracing': '--enable-distributed-tracing',
  'enable-lease-checkpoint': '--feature-gates=LeaseCheckpoint=true',
  'enable-lease-checkpoint-persist': '--feature-gates=LeaseCheckpointPersist=true',
  'initial-corrupt-check': '--feature-gates=InitialCorruptCheck=true',
  'memory-mlock': '--memory-mlock',
  'peer-skip-client-san-verification': '--peer-skip-client-san-verification',
  'snapshot-catchup-entries': '--snapshot-catchup-entries',
  'stop-grpc-service-on-defrag': '--feature-gates=StopGRPCServiceOnDefrag=true',
  'txn-mode-write-with-shared-buffer': '--feature-gates=TxnModeWriteWithSharedBuffer=true',
  'warning-apply-duration': '--warning-apply-duration',
  'warning-unary-request-duration': '--warning-unary-request-duration',
  'watch-progress-notify-interval': '--watch-progress-notify-interval',
};

/** The other way round, for flags 3.6 renamed (not the feature gates, which 3.6 introduced). */
const OLD_NAME = new Map(
  Object.entries(RENAMED)
    .filter(([, now]) => !now.startsWith('--feature-gates'))
    .map(([was, now]) => [now, `--experimental-${was}`]),
);

/**
 * Throw before spawning when `extraArgs` uses a flag that `version` does not have (removed, or
 * not yet renamed), naming the one to use; etcd itself would only say "unknown flag".
 */
export function checkExtraArgs(version: string, extraArgs: readonly string[] = []): void {
  for (const arg of extraArgs) {
    const flag = /^--?([a-z0-9-]+)/.exec(arg)?.[1];
    if (!flag) continue;
    if (flag.startsWith('experimental-') && etcdVersionAtLeast(version, '3.7')) {
      const replacement = RENAMED[flag.slice('experimental-'.length)];
      throw new EtcdFlagError(
        `etcd ${version} has no --${flag} (3.7 removed every --experimental-* flag)` +
          (replacement ? `; use ${replacement} (3.6 and later)` : "; see etcd 3.6's changelog for its replacement"),
      );
    }
    const old = OLD_NAME.get(`--${flag}`);
    if (old && !etcdVersionAtLeast(version, '3.6')) {
      throw new EtcdFlagError(`etcd ${version} has no --${flag} (new in 3.6); before 3.6 it is ${old}`);
    }
    if (flag === 'enable-v2' && etcdVersionAtLeast(version, '3.6')) {
      throw new EtcdFlagError(`etcd ${version} has no --enable-v2 (removed in 3.6, with the v2 API)`);
    }
  }
}

/** Go duration for etcd's duration flags. */
const ms = (n: number) => `${Math.round(n)}ms`;

/** The full command line of one member, in the dialect of etcd `version`. */
export function memberArgs(version: string, s: MemberFlagSettings): string[] {
  const modern = etcdVersionAtLeast(version, '3.6');
  return [
    '--name',
    s.name,
    '--data-dir',
    s.dataDir,
    '--listen-client-urls',
    s.clientUrl,
    '--advertise-client-urls',
    s.clientUrl,
    '--listen-peer-urls',
    s.peerUrl,
    '--initial-advertise-peer-urls',
    s.peerUrl,
    '--initial-cluster',
    s.initialCluster,
    '--initial-cluster-state',
    'new',
    '--initial-cluster-token',
    s.clusterToken,
    // 3.4 defaults to the old capnslog logger; zap on every version keeps logs alike. stderr (not a
    // file path) so Go panics and flag errors land in the same per-member log.
    '--logger',
    'zap',
    '--log-outputs',
    'stderr',
    ...(s.heartbeatMs !== undefined ? ['--heartbeat-interval', String(s.heartbeatMs)] : []),
    ...(s.electionMs !== undefined ? ['--election-timeout', String(s.electionMs)] : []),
    ...(s.watchProgressNotifyIntervalMs !== undefined
      ? [modern ? '--watch-progress-notify-interval' : '--experimental-watch-progress-notify-interval', ms(s.watchProgressNotifyIntervalMs)]
      : []),
    ...(s.tls
      ? [
          '--cert-file',
          s.tls.certFile,
          '--key-file',
          s.tls.keyFile,
          '--trusted-ca-file',
          s.tls.trustedCaFile,
          ...(s.tls.clientCertAuth ? ['--client-cert-auth'] : []),
        ]
      : []),
    ...(s.extraArgs ?? []),
  ];
}
