// Pure checks over what a chaos run recorded. No I/O: main.ts gathers the history, these judge it.
// One module per idea; this file only re-exports.
export * from './history.js';
export * from './freezes.js';
export * from './leases.js';
export * from './excuses.js';
export * from './overlaps.js';
export * from './fenced.js';
export * from './counter.js';
export * from './semaphore.js';
export * from './permits.js';
export * from './rw.js';
export * from './election.js';
export * from './verdict.js';
export * from './figures.js';
export * from './recipes.js';
export * from './record.js';
export * from './stale.js';
