/**
 * Test helpers (`etcd-concurrency/testing`): real etcd clusters and a fault-injecting TCP proxy,
 * so lock and election code can be tested against the real thing, including its failures.
 *
 * @packageDocumentation
 */

/**
 * Start a throwaway 1- or 3-member etcd cluster on free loopback ports and resolve once it is
 * healthy and has a leader. Needs the `etcd` binary (Debian: `etcd-server`).
 *
 * @example
 * ```ts
 * import { startEtcd } from 'etcd-concurrency/testing';
 *
 * await using etcd = await startEtcd({ members: 3 });
 * // give etcd.endpoints (e.g. ['127.0.0.1:40123', ...]) to the client under test, then:
 * await etcd.kill(await etcd.leaderIndex()); // force a leader change mid-test
 * await etcd.leaderIndex(); // resolves once the survivors have elected a new leader
 * ```
 */
export { startEtcd } from './etcd.js';

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

/** A running cluster returned by {@link startEtcd}: endpoints plus kill/restart/pause controls. */
export type { EtcdCluster } from './etcd.js';
/** One member of an {@link EtcdCluster}; its `running`/`paused`/`pid` fields are kept current. */
export type { EtcdMember } from './etcd.js';
/** Options for {@link startEtcd}: size, TLS, Raft timing, binary and directories. */
export type { StartEtcdOptions } from './etcd.js';
/** Client-side TLS settings for {@link startEtcd}; certificates must cover 127.0.0.1. */
export type { EtcdTlsOptions } from './etcd.js';
/** A running proxy returned by {@link startProxy}. */
export type { TcpProxy } from './proxy.js';
/** Options for {@link startProxy}. */
export type { StartProxyOptions } from './proxy.js';
