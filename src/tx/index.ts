export * from './lock-manager.js';
export * from './lock-modes.js';
export * from './messages.js';
export * from './tx-id.js';
export * from './tx-state.js';
export * from './tx-state-map.js';
