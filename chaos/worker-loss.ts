// When and why a chaos worker's handle said "not held any more", for the checker.
import { OwnershipLostError, SessionExpiredError } from '../src/index.js';
import { now } from './common.js';

/**
 * Watches the handle: the first moment it said "not held any more", and why (`lostReason`): the
 * `reason` of the handle's abort reason (an OwnershipLostError: `key_deleted`, `lease_expired`,
 * `released`, ...), followed, when the loss came from the session, by `/<reason>` with the
 * SessionExpiredError's reason (`deadline`, `lease_gone`, `closed`, `client_closed`): a session lost
 * to its deadline and one whose lease etcd said was gone are both `lease_expired`, and the checker
 * must tell them apart (see REVOKE_LOSS_REASONS in checker/excuses.ts). `other` for any other abort reason.
 */
export function lossClock(handle: { signal: AbortSignal }): { lostAt: () => number | undefined; reason: () => string | undefined } {
  let at: number | undefined;
  const sig = handle.signal;
  if (sig.aborted) at = now();
  else sig.addEventListener('abort', () => (at ??= now()), { once: true });
  const reason = (): string | undefined => {
    if (!sig.aborted) return undefined;
    const r: unknown = sig.reason;
    if (!(r instanceof OwnershipLostError)) return 'other';
    return r.cause instanceof SessionExpiredError ? `${r.reason}/${r.cause.reason}` : r.reason;
  };
  return { lostAt: () => at, reason };
}
