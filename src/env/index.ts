export type { Clock } from './clock.js';
export type { Random } from './random.js';
export { sleep, type TimerHandle, type Timers } from './timers.js';
export type { PeerIdentity, Transport, TransportEvent, TransportHandler } from './transport.js';
