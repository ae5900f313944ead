export * from './lmdb-environment.js';
export * from './mv-partition-storage.js';
export * from './replicated-storage.js';
export * from './storage-engine.js';
export * from './tx-state-storage.js';
