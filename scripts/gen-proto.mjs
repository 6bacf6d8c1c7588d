// Regenerates src/proto/etcd.ts from src/proto/etcd.proto with ts-proto. The output is committed,
// so users never need protoc; run this (`npm run proto`) only after editing the .proto.
// Needs Debian's protobuf-compiler (`apt-get install protobuf-compiler`).
import { execFileSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import path from 'node:path';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const plugin = path.join(root, 'node_modules', '.bin', 'protoc-gen-ts_proto');
const opts = [
  'forceLong=bigint', // every int64 is a bigint: lease ids exceed 2^53
  'outputServices=generic-definitions',
  'esModuleInterop=true',
  'importSuffix=.js',
  'env=node',
  'useOptionals=all',
  'outputJsonMethods=false',
  'outputPartialMethods=false',
  'outputTypeRegistry=false',
  'useExactTypes=false',
  'stringEnums=false',
].join(',');
execFileSync(
  'protoc',
  [
    `--plugin=protoc-gen-ts_proto=${plugin}`,
    `--ts_proto_out=${path.join(root, 'src', 'proto')}`,
    `--ts_proto_opt=${opts}`,
    `-I${path.join(root, 'src', 'proto')}`,
    'etcd.proto',
  ],
  { stdio: 'inherit' },
);
console.log('generated src/proto/etcd.ts');
