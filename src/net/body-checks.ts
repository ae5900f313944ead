/**
 * Checks of message bodies at the receive edge: each layer describes its kinds' fields with these combinators, the
 * node joins every layer's table into one `Record<Kind, BodyCheck>` and the messenger runs it on every body before
 * dispatch (messenger.ts `bodyChecks`; a kind without a check is refused as UNKNOWN_MESSAGE). What passes is a
 * well-formed message of its kind, so handlers, cores and applies trust the types and never assert on what a peer
 * sent (core/assert.ts: peer input is validated, never asserted).
 *
 * A check returns a problem (a short text naming the field) or undefined. The combinators are built once, at module
 * load; running one allocates nothing of its own on the success path (fields are walked from precomputed lists,
 * arrays by index; a tx id's pattern match is the exception), because bodies are checked on the hot path: every Raft
 * Append and every transaction request. Only a refusal builds its message.
 *
 * Unknown fields are ignored rather than refused (the envelope, a transport-level shape, refuses them): a newer peer
 * may add an optional field, and no handler reads a field it does not know. A field whose value is `undefined` is an
 * absent field (the codec drops such fields, and a message to this node's own name is delivered without encoding).
 */
import { LIMITS } from '../core/limits.js';
import { MAX_TIMESTAMP } from '../hlc/timestamp.js';

/**
 * What a check knows of the message around the value: the largest timestamp a body may carry for the receiver to
 * absorb. A correct sender stamps its envelope after choosing every timestamp of its body, and a reader's readTs is at
 * most maxClockSkew past its node's clock (rule 8), so nothing a receiver absorbs lies beyond the envelope's timestamp
 * plus maxClockSkew; the envelope itself passed the skew check, so a body cannot drag the receiver's clock further.
 */
export interface CheckContext {
  readonly tsCeiling: bigint;
}

/** A problem with `value` (a few words naming what is wrong), or undefined when it is well-formed. */
export type Check = (value: unknown, context: CheckContext) => string | undefined;

/** Checks one body of a known kind (its `kind` already matched the table's key). */
export type BodyCheck = (body: Readonly<Record<string, unknown>>, context: CheckContext) => string | undefined;

/** No ceiling: for checks outside the messenger (tests, a body checked on its own). */
export const NO_CEILING: CheckContext = { tsCeiling: MAX_TIMESTAMP };

type Rec = Readonly<Record<string, unknown>>;

export function isRecord(value: unknown): value is Rec {
  return typeof value === 'object' && value !== null && !Array.isArray(value) && !(value instanceof Uint8Array);
}

// ---- leaves ---------------------------------------------------------------------------------------------------------

export const anything: Check = () => undefined;
export const absent: Check = (v) => (v === undefined ? undefined : 'must be absent');
export const boolean: Check = (v) => (typeof v === 'boolean' ? undefined : 'must be a boolean');
export const string: Check = (v) => (typeof v === 'string' ? undefined : 'must be a string');
export const bytes: Check = (v) => (v instanceof Uint8Array ? undefined : 'must be bytes');
/** A node name, ephemeral id, replica incarnation or partition id: a non-empty string of bounded length. */
export const id: Check = (v) =>
  typeof v === 'string' && v.length > 0 && v.length <= LIMITS.identityCharsMax ? undefined : 'must be an id';
/** A log index, term, count or revision: a safe integer >= 0. */
export const index: Check = (v) =>
  typeof v === 'number' && Number.isSafeInteger(v) && v >= 0 ? undefined : 'must be an integer >= 0';
export const positive: Check = (v) =>
  typeof v === 'number' && Number.isSafeInteger(v) && v > 0 ? undefined : 'must be an integer > 0';
/**
 * A hybrid timestamp the receiver may absorb (a commitTs, a readTs, a write's timestamp): 0 is never sent for "none"
 * (such fields are omitted), and it lies at or below the message's ceiling (CheckContext).
 */
export const timestamp: Check = (v, context) => {
  if (typeof v !== 'bigint' || v <= 0n || v >= MAX_TIMESTAMP) return 'must be a timestamp';
  return v <= context.tsCeiling ? undefined : 'is beyond the sender clock + the skew bound';
};
/** A lease bound (a token's start, an expiration): ahead of the sender's clock by design, compared, never absorbed. */
export const leaseBound: Check = (v) =>
  typeof v === 'bigint' && v > 0n && v < MAX_TIMESTAMP ? undefined : 'must be a timestamp';

/** One of a few literal values. */
export function literal(...values: readonly (string | number | boolean | null)[]): Check {
  return (v) => (values.includes(v as string) ? undefined : `must be one of ${values.join(', ')}`);
}

// ---- combinators ----------------------------------------------------------------------------------------------------

export function optional(check: Check): Check {
  return (v, context) => (v === undefined ? undefined : check(v, context));
}

export function nullable(check: Check): Check {
  return (v, context) => (v === null ? undefined : check(v, context));
}

/** A record with these fields (each field's check decides whether it may be absent). */
export function fields(spec: Readonly<Record<string, Check>>): Check {
  const checkFields = fieldsCheck(spec);
  return (v, context) => (isRecord(v) ? checkFields(v, context) : 'must be a record');
}

/** The fields of a body (its kind already matched): the same walk as `fields`, on a value known to be a record. */
export function fieldsCheck(spec: Readonly<Record<string, Check>>): BodyCheck {
  const list = Object.entries(spec);
  return (v, context) => {
    for (let i = 0; i < list.length; i++) {
      const [name, check] = list[i]!;
      const problem = check(v[name], context);
      if (problem !== undefined) return `${name} ${problem}`;
    }
    return undefined;
  };
}

/** An array of at most `max` items, each passing `check`. */
export function arrayOf(check: Check, max: number): Check {
  return (v, context) => {
    if (!Array.isArray(v)) return 'must be an array';
    if (v.length > max) return `must hold at most ${max} items`;
    for (let i = 0; i < v.length; i++) {
      const problem = check(v[i], context);
      if (problem !== undefined) return `[${i}] ${problem}`;
    }
    return undefined;
  };
}

/** A record tagged by `tag`, checked by the variant its tag names. */
export function tagged(tag: string, variants: Readonly<Record<string, Check>>): Check {
  return (v, context) => {
    if (!isRecord(v)) return 'must be a record';
    const t = v[tag];
    if (typeof t !== 'string' || !Object.hasOwn(variants, t)) return `${tag} ${short(t)} is unknown`;
    return variants[t]!(v, context);
  };
}

/** JSON-compatible data (finite numbers, plain records and arrays), nested at most `depthMax` levels. */
export function json(depthMax: number): Check {
  const walk = (v: unknown, depth: number): string | undefined => {
    if (depth > depthMax) return 'nests too deep';
    switch (typeof v) {
      case 'string':
      case 'boolean':
        return undefined;
      case 'number':
        return Number.isFinite(v) ? undefined : 'holds a number that is not finite';
      case 'object': {
        if (v === null) return undefined;
        if (Array.isArray(v)) {
          for (let i = 0; i < v.length; i++) {
            const problem = walk(v[i], depth + 1);
            if (problem !== undefined) return problem;
          }
          return undefined;
        }
        if (v instanceof Uint8Array) return 'holds bytes below the top level';
        for (const key in v) {
          if (!Object.hasOwn(v, key)) continue;
          const problem = walk((v as Rec)[key], depth + 1);
          if (problem !== undefined) return problem;
        }
        return undefined;
      }
      default:
        return `holds a ${typeof v}`;
    }
  };
  return (v) => walk(v, 0);
}

function short(value: unknown): string {
  return typeof value === 'string' ? JSON.stringify(value.slice(0, 64)) : typeof value;
}
