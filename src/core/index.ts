export * from './assert.js';
export * from './errors.js';
export * from './ids.js';
export * from './limits.js';
export * from './partitioning.js';
