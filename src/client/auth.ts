/**
 * Logins on the client port (DESIGN §4b): a user with a password (checked against its scrypt hash in metastorage,
 * passwords.ts), or a client certificate signed by the cluster CA whose CN is the user. Failed password logins are
 * rate-limited per (source address, user): the first `authFailuresFree` cost nothing more, then each failure opens a
 * wait that doubles (authDelayMsBase … authDelayMsMax) during which every login of that pair is refused at once,
 * without a password check, so neither a fast loop nor parallel connections test more than a few passwords; a
 * success forgets the pair's failures. Keyed by pair, so an attacker elsewhere cannot lock a user out. Every refusal
 * is counted (`basalt_auth_failures_total`) and reported to the diagnostics sink without the password.
 *
 * Time comes from the injected clock; the table of failures is bounded (authFailureEntriesMax, oldest forgotten).
 */
import type { UserRecord } from '../cluster/metastorage-state.js';
import { BasaltError } from '../core/errors.js';
import { LIMITS } from '../core/limits.js';
import type { Clock } from '../env/clock.js';
import { hashPassword, SALT_BYTES, verifyPassword } from './passwords.js';

export interface ClientAuthOptions {
  readonly clock: Clock;
  /** Strong randomness for password salts (src/env/real-random.ts `secureRandomBytes`). */
  readonly salts: (bytes: number) => Uint8Array;
  readonly failuresFree?: number;
  readonly delayMsBase?: number;
  readonly delayMsMax?: number;
}

export interface AuthCounters {
  readonly auth_logins_total: number;
  readonly auth_failures_total: number;
  /** Failures refused during a wait, without a password check. */
  readonly auth_throttled_total: number;
}

interface Failures {
  count: number;
  lastMs: number;
  /** No password of this pair is checked before this time. */
  openAtMs: number;
}

export class Authenticator {
  private readonly failures = new Map<string, Failures>();
  private logins = 0;
  private refused = 0;
  private throttled = 0;

  constructor(
    private readonly options: ClientAuthOptions,
    private readonly users: (name: string) => UserRecord | undefined,
  ) {}

  /** The user record of a password login; throws UNAUTHENTICATED (the message names no password). */
  async loginWithPassword(source: string, name: string, password: string): Promise<UserRecord> {
    const key = `${source}\u0000${name}`;
    const nowMs = this.options.clock.monotonicMs();
    const entry = this.current(key, nowMs);
    if (entry !== undefined && nowMs < entry.openAtMs) {
      this.throttled++;
      this.refused++;
      const waitMs = Math.ceil(entry.openAtMs - nowMs);
      throw new BasaltError(
        'UNAUTHENTICATED',
        `too many failed logins of user ${name} from ${source}: try again in ${waitMs} ms`,
        { user: name, retryAfterMs: waitMs },
      );
    }
    const user = this.users(name);
    if (await verifyPassword(password, user?.password)) {
      this.failures.delete(key);
      this.logins++;
      return user!;
    }
    this.fail(key, this.options.clock.monotonicMs());
    throw new BasaltError('UNAUTHENTICATED', `wrong user name or password (user ${name})`, { user: name });
  }

  /** The user a verified client certificate names; throws UNAUTHENTICATED when no such user exists. */
  loginWithCertificate(name: string): UserRecord {
    const user = this.users(name);
    if (user === undefined) {
      this.refused++;
      throw new BasaltError('UNAUTHENTICATED', `the client certificate names user ${name}, who does not exist`, {
        user: name,
      });
    }
    this.logins++;
    return user;
  }

  /** A refusal decided elsewhere (a client certificate that failed), counted with the others. */
  countRefusal(): void {
    this.refused++;
  }

  /** A new password's hash, with a fresh salt. */
  hash(password: string): ReturnType<typeof hashPassword> {
    return hashPassword(password, this.options.salts(SALT_BYTES));
  }

  counters(): AuthCounters {
    return { auth_logins_total: this.logins, auth_failures_total: this.refused, auth_throttled_total: this.throttled };
  }

  private current(key: string, nowMs: number): Failures | undefined {
    const entry = this.failures.get(key);
    if (entry !== undefined && nowMs - entry.lastMs > LIMITS.authFailuresForgetMs) {
      this.failures.delete(key);
      return undefined;
    }
    return entry;
  }

  private fail(key: string, nowMs: number): void {
    this.refused++;
    const entry = this.current(key, nowMs) ?? { count: 0, lastMs: nowMs, openAtMs: nowMs };
    entry.count++;
    entry.lastMs = nowMs;
    const free = this.options.failuresFree ?? LIMITS.authFailuresFree;
    const base = this.options.delayMsBase ?? LIMITS.authDelayMsBase;
    const max = this.options.delayMsMax ?? LIMITS.authDelayMsMax;
    const over = entry.count - free;
    entry.openAtMs = over <= 0 ? nowMs : nowMs + Math.min(max, base * 2 ** Math.min(over - 1, 30));
    // Re-inserted last: the map's order is the order of last failures, so the first entry is the oldest.
    this.failures.delete(key);
    this.failures.set(key, entry);
    if (this.failures.size > LIMITS.authFailureEntriesMax) this.failures.delete(this.failures.keys().next().value!);
  }
}
