// A chaos worker's side of the fenced store, which lives in the parent (fenced-store.ts): a request
// is a JSON line on stdout, its answer a 'store-reply' line on stdin (settleStore()).
import { emit } from './worker-io.js';
import { now, type ParentMessage, type RWMode, type StoreOp } from './common.js';

export interface StoreReply {
  ok: boolean;
  value: number;
  careful?: boolean;
}
let nextStoreId = 1;
const pendingStore = new Map<number, (r: StoreReply) => void>();
export function store(
  opName: StoreOp,
  register: string,
  token: bigint,
  extra: { value?: number; opId?: string; careful?: boolean; mode?: RWMode } = {},
): Promise<StoreReply> {
  const id = nextStoreId++;
  return new Promise((resolve) => {
    pendingStore.set(id, resolve);
    emit({ t: 'store', id, op: opName, register, token: token.toString(), ...extra, sentAt: now() });
  });
}

/** Hands a 'store-reply' to the request waiting for it. */
export function settleStore(m: Extract<ParentMessage, { t: 'store-reply' }>): void {
  const r = pendingStore.get(m.id);
  pendingStore.delete(m.id);
  r?.({ ok: m.ok, value: m.value, careful: m.careful });
}
