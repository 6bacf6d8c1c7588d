// Small helpers shared by the test files. Nothing here mocks etcd: every helper reads real state.
export * from './helpers/etcd.js';
export * from './helpers/waiting.js';
export * from './helpers/cli.js';
export * from './helpers/etcdctl.js';
export * from './helpers/certs.js';
export * from './helpers/server-metrics.js';
export * from './helpers/event-log.js';
export * from './helpers/sessions.js';
export * from './helpers/file-etcd.js';
export * from './helpers/owner-compare.js';
