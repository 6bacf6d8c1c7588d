// The etcd launcher: shared by the test helpers (`etcd-concurrency/testing`) and `etcd-concurrency dev`.
export { startEtcd, type StartEtcdOptions, type EtcdCluster, type EtcdTlsOptions } from './cluster.js';
export type { EtcdMember } from './member.js';
export { etcdFreeEnv } from './member.js';
export {
  resolveEtcd,
  etcdVersion,
  etcdBinaryVersion,
  etcdCacheDir,
  cachedEtcds,
  compareEtcdVersions,
  etcdVersionAtLeast,
  EtcdNotFoundError,
  EtcdVersionError,
  EtcdCacheError,
  SUPPORTED_ETCD_LINES,
  type EtcdInstall,
  type ResolveEtcdOptions,
} from './binary.js';
export { EtcdFlagError } from './flags.js';
export { EtcdPortError } from './ports.js';
