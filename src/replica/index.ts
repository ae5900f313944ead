export * from './apply-result.js';
export * from './commands.js';
export * from './lease.js';
export * from './partition-replica.js';
export * from './primary.js';
export * from './proposals.js';
export * from './safe-time.js';
export * from './state-machine.js';
