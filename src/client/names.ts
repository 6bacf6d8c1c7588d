// The names the client records under (metrics/names.ts lists them with the locks' own): constants only.

/** The instrumentation scope: the meter's and the tracer's name. */
export const SCOPE = 'etcd-concurrency';

/** The client's instrument names (metrics/names.ts lists them with the others). */
export const CLIENT_METRIC = {
  rpcDuration: 'rpc.client.call.duration',
  watchResumes: 'etcd_concurrency.watch.resumes',
  failovers: 'etcd_concurrency.client.failovers',
  txnBatchSize: 'etcd_concurrency.client.txn.batch_size',
} as const;

/** Semantic conventions v1.40.0 for the calls' attributes. */
export const RPC_ATTR = {
  /** `grpc`. */
  rpcSystemName: 'rpc.system.name',
  /** Fully qualified, `etcdserverpb.KV/Range`. */
  rpcMethod: 'rpc.method',
  /** The gRPC status by name, `OK`, `UNAVAILABLE`. */
  rpcResponseStatusCode: 'rpc.response.status_code',
  /** On a failed call only, the status by name (gRPC counts every status but OK an error). */
  errorType: 'error.type',
} as const;
