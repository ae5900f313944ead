/**
 * Failures raised by the simulator itself (runaway runs, events that threw, failed checks). Every one carries the seed
 * in its message and details, so that a failing run can be replayed bit for bit from the report alone.
 */
import { BasaltError } from '../core/errors.js';

export class SimulationError extends BasaltError {
  override readonly name = 'SimulationError';
  readonly seed: string | number;

  constructor(seed: string | number, message: string, details?: Readonly<Record<string, unknown>>, cause?: unknown) {
    super('INTERNAL', `${message} (seed=${JSON.stringify(seed)})`, { ...details, seed }, { cause });
    this.seed = seed;
  }
}
