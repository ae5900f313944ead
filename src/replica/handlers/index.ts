export * from './intent-resolver.js';
export * from './lease-confirm.js';
export * from './read-only.js';
export * from './read-write.js';
export * from './tx-cleanup.js';
export * from './tx-finish.js';
