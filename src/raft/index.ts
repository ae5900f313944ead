export * from './lmdb-log-storage.js';
export * from './log-storage.js';
export * from './memory-log-storage.js';
export * from './progress.js';
export * from './raft.js';
export * from './raft-log.js';
export * from './types.js';
