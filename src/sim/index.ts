/** The deterministic simulator: seeded randomness, virtual time, simulated network, clocks and disks, crash/restart. */
export * from './clock.js';
export * from './disk.js';
export * from './errors.js';
export * from './nemesis.js';
export * from './network.js';
export * from './random.js';
export * from './scheduler.js';
export * from './world.js';
