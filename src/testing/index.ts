/**
 * Test helpers (`etcd-concurrency/testing`): real etcd clusters and a fault-injecting TCP proxy,
 * so lock and election code can be tested against the real thing, including its failures.
 *
 * @packageDocumentation
 */

/**
 * Start a throwaway 1- or 3-member etcd cluster on free loopback ports (or from `basePort`) and
 * resolve once it is healthy and has a leader. `version` (or the `ETCD_VERSION` variable) picks an
 * etcd from the cache that `npm run etcd -- install 3.7` fills; by default the newest cached one,
 * else `etcd` on PATH. `cluster.version` is the server's version.
 *
 * @example
 * ```ts
 * import { startEtcd } from 'etcd-concurrency/testing';
 *
 * await using etcd = await startEtcd({ members: 3 }); // or { members: 3, version: '3.6' }
 * // give etcd.endpoints (e.g. ['127.0.0.1:40123', ...]) to the client under test, then:
 * await etcd.kill(await etcd.leaderIndex()); // force a leader change mid-test
 * await etcd.leaderIndex(); // resolves once the survivors have elected a new leader
 * ```
 */
export { startEtcd } from '../launcher/index.js';

/**
 * Put a loopback TCP proxy in front of one etcd endpoint so a test can cut, stall, slow down or
 * refuse the client's connections without touching the server.
 *
 * @example
 * ```ts
 * const proxy = await startProxy(etcd.endpoints[0]);
 * // point the client at proxy.endpoint, then:
 * proxy.blackhole(true); // partition: nothing flows, nothing closes
 * ```
 */
export { startProxy } from './proxy.js';

/**
 * Which etcd {@link startEtcd} would run, and its version, without starting it; plus version
 * comparison for tests that depend on the server version.
 *
 * @example
 * ```ts
 * const version = await etcdVersion(); // '3.7.3': ETCD_VERSION, else the newest cached, else PATH
 * if (etcdVersionAtLeast(version, '3.6')) { ... }
 * ```
 */
export {
  etcdVersion,
  etcdVersionAtLeast,
  compareEtcdVersions,
  resolveEtcd,
  etcdCacheDir,
  SUPPORTED_ETCD_LINES,
} from '../launcher/index.js';

/** Errors from {@link startEtcd}: a missing version (with what to install), a version mismatch, a removed flag, a taken port. */
export { EtcdNotFoundError, EtcdVersionError, EtcdFlagError, EtcdPortError } from '../launcher/index.js';

/** An etcd found by {@link resolveEtcd}: version and binary paths. */
export type { EtcdInstall, ResolveEtcdOptions } from '../launcher/index.js';

/** A running cluster returned by {@link startEtcd}: endpoints plus kill/restart/pause controls. */
export type { EtcdCluster } from '../launcher/index.js';
/** One member of an {@link EtcdCluster}; its `running`/`paused`/`pid` fields are kept current. */
export type { EtcdMember } from '../launcher/index.js';
/** Options for {@link startEtcd}: size, version, ports, TLS, Raft timing, binary and directories. */
export type { StartEtcdOptions } from '../launcher/index.js';
/** Client-side TLS settings for {@link startEtcd}; certificates must cover 127.0.0.1. */
export type { EtcdTlsOptions } from '../launcher/index.js';
/** A running proxy returned by {@link startProxy}. */
export type { TcpProxy } from './proxy.js';
/** Options for {@link startProxy}. */
export type { StartProxyOptions } from './proxy.js';

/**
 * Throwaway PostgreSQL and Redis servers on free loopback ports, for testing fenced writes
 * (`etcd-concurrency/fencing`) against the real databases. Each runs in its own temp dir, which
 * stop() removes; `await using` stops them. {@link ServerNotFoundError} when one is not installed.
 *
 * @example
 * ```ts
 * await using pg = await startPostgres(); // as root: runs as the postgres system user
 * const pool = new Pool({ connectionString: pg.connectionString });
 * await using redis = await startRedis();
 * const client = new Redis(redis.url);
 * ```
 */
export { startPostgres, findPostgres, type PostgresServer, type StartPostgresOptions } from './postgres.js';
export { startRedis, findRedis, type RedisServer, type StartRedisOptions } from './redis.js';
export { ServerNotFoundError, ServerStartError } from './server-process.js';

/**
 * A deterministic simulator: the library's real Client, sessions and primitives against a simulated
 * etcd cluster on virtual time, with faults to inject (partitions, member crashes, leader changes,
 * paused and crashed processes, lost answers, compaction, an operator's edits). One seed, one run:
 * a failure replays exactly. Needs the optional peer dependency `@sinonjs/fake-timers`. See
 * docs/simulation.md.
 *
 * @example
 * ```ts
 * import { simulate } from 'etcd-concurrency/testing';
 *
 * const { value, traceHash } = await simulate({ seed: 42 }, async (sim) => {
 *   const a = sim.process('worker-a');
 *   const client = sim.client(a);
 *   return a.run(() => myJob(client)); // your lock-using code, on virtual time
 * });
 * ```
 */
export { simulate, Simulation, SimulationTimeoutError, type SimulateOptions, type SimulationResult, type SimProcess } from './sim/index.js';
