/** Public API of Basalt. */
export * from './core/index.js';
export * from './hlc/index.js';
