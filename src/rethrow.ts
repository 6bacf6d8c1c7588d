// A stored error thrown again (a lost session's, an ended holding's): the same object, so `===` on
// signal.reason still holds, but with the stack of this throw, followed by where it was first made.
// Without this, a worker that loops back to lock() on a lost session gets a stack that points at an
// earlier, unrelated assertHeld().

/** The stack each error had when first made, before any rethrow rewrote it. */
const firstStacks = new WeakMap<Error, string>();

/** Returns `err` (to be thrown by the caller) with its stack set to the caller's; other values as they are. */
export function rethrown<T>(err: T): T {
  if (!(err instanceof Error) || typeof Error.captureStackTrace !== 'function') return err;
  let first = firstStacks.get(err);
  if (first === undefined) firstStacks.set(err, (first = err.stack ?? ''));
  Error.captureStackTrace(err, rethrown);
  const firstFrames = first.split('\n').filter((l) => /^\s+at /.test(l));
  if (firstFrames.length > 0) err.stack = `${err.stack}\n    --- first raised:\n${firstFrames.join('\n')}`;
  return err;
}
