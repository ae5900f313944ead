export * from './hybrid-clock.js';
export * from './timestamp.js';
