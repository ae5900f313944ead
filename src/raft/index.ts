export * from './progress.js';
export * from './raft.js';
export * from './raft-log.js';
export * from './types.js';
