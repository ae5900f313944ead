/**
 * The wire envelope: what the messenger puts around every message body. Three shapes, tagged by `type`:
 *   - `oneway`: a body nobody answers;
 *   - `request`: a body that expects exactly one `response` carrying the same `requestId`;
 *   - `response`: either a body or the error data of a failed request (exactly one of the two).
 * Every envelope names its sender (stable name + ephemeral id) and carries the sender's HLC timestamp, which the
 * receiver absorbs before anything else happens (DESIGN §2, safety rule 8).
 *
 * Bodies are plain data tagged by `kind`; this layer knows nothing of the kinds the layers above define, so envelopes
 * are generic over `{ kind: string }`. A decoded value that is not exactly one of these shapes is malformed:
 * `parseEnvelope` checks every field and rejects unknown ones, so nothing half-valid reaches a handler.
 */
import { type ErrorData, errorHintProblem } from '../core/errors.js';
import type { HybridTimestamp, NodeId, NodeIdentity } from '../core/ids.js';
import { LIMITS } from '../core/limits.js';
import { MAX_TIMESTAMP } from '../hlc/timestamp.js';

/** What every message body has: a `kind` tag the receiver dispatches on. */
export interface MessageBody {
  readonly kind: string;
}

/** Correlates a response with its request; unique per sending node while the request is pending. */
export type RequestId = number;

interface EnvelopeHeader {
  readonly from: NodeIdentity;
  readonly ts: HybridTimestamp;
}

export interface OneWayEnvelope<B extends MessageBody = MessageBody> extends EnvelopeHeader {
  readonly type: 'oneway';
  readonly body: B;
}

export interface RequestEnvelope<B extends MessageBody = MessageBody> extends EnvelopeHeader {
  readonly type: 'request';
  readonly requestId: RequestId;
  readonly body: B;
}

export interface SuccessResponseEnvelope<B extends MessageBody = MessageBody> extends EnvelopeHeader {
  readonly type: 'response';
  /** The requester's ephemeral id: a response reaching a later incarnation of the same name is not for it. */
  readonly to?: NodeId;
  readonly requestId: RequestId;
  readonly body: B;
  readonly error?: undefined;
}

export interface ErrorResponseEnvelope extends EnvelopeHeader {
  readonly type: 'response';
  readonly to?: NodeId;
  readonly requestId: RequestId;
  readonly error: ErrorData;
  readonly body?: undefined;
}

export type ResponseEnvelope<B extends MessageBody = MessageBody> = SuccessResponseEnvelope<B> | ErrorResponseEnvelope;

export type Envelope<B extends MessageBody = MessageBody> =
  | OneWayEnvelope<B>
  | RequestEnvelope<B>
  | ResponseEnvelope<B>;

export type EnvelopeType = Envelope['type'];

export type ParsedEnvelope =
  | { readonly ok: true; readonly envelope: Envelope }
  | { readonly ok: false; readonly reason: string };

type Fields = Readonly<Record<string, unknown>>;

const ALLOWED_KEYS: Readonly<Record<EnvelopeType, ReadonlySet<string>>> = {
  oneway: new Set(['type', 'from', 'ts', 'body']),
  request: new Set(['type', 'from', 'ts', 'requestId', 'body']),
  response: new Set(['type', 'from', 'to', 'ts', 'requestId', 'body', 'error']),
};

/** Checks a decoded value field by field. Never throws: a bad value yields `{ ok: false, reason }`. */
export function parseEnvelope(value: unknown): ParsedEnvelope {
  const reason = envelopeProblem(value);
  return reason === undefined ? { ok: true, envelope: value as Envelope } : { ok: false, reason };
}

function envelopeProblem(value: unknown): string | undefined {
  if (!isRecord(value)) return 'envelope is not an object';
  const type = value['type'];
  if (type !== 'oneway' && type !== 'request' && type !== 'response') return `unknown envelope type ${String(type)}`;
  const allowed = ALLOWED_KEYS[type];
  for (const key of Object.keys(value)) {
    if (!allowed.has(key)) return `unexpected field ${key} in a ${type} envelope`;
  }
  return (
    identityProblem(value['from']) ??
    timestampProblem(value['ts']) ??
    (type === 'oneway' ? undefined : requestIdProblem(value['requestId'])) ??
    (type === 'response' && value['to'] !== undefined ? nameProblem(value['to'], 'to') : undefined) ??
    (type === 'response' ? responseProblem(value) : bodyProblem(value['body']))
  );
}

function identityProblem(from: unknown): string | undefined {
  if (!isRecord(from)) return 'from is not an object';
  const keys = Object.keys(from);
  if (keys.length !== 2) return 'from must have exactly name and id';
  return nameProblem(from['name'], 'from.name') ?? nameProblem(from['id'], 'from.id');
}

/** A node name or id: a non-empty string of bounded length. */
export function nameProblem(value: unknown, what: string): string | undefined {
  if (typeof value !== 'string' || value.length === 0) return `${what} is not a non-empty string`;
  if (value.length > LIMITS.identityCharsMax) return `${what} is longer than ${LIMITS.identityCharsMax} characters`;
  return undefined;
}

function timestampProblem(ts: unknown): string | undefined {
  if (typeof ts !== 'bigint') return 'ts is not a bigint';
  // MAX_TIMESTAMP itself is excluded: a clock cannot move past it, so absorbing it would be a bug.
  if (ts < 0n || ts >= MAX_TIMESTAMP) return 'ts is out of range';
  return undefined;
}

function requestIdProblem(requestId: unknown): string | undefined {
  if (typeof requestId !== 'number' || !Number.isSafeInteger(requestId) || requestId < 1) {
    return 'requestId is not a positive integer';
  }
  return undefined;
}

function bodyProblem(body: unknown): string | undefined {
  if (!isRecord(body)) return 'body is not an object';
  const kind = body['kind'];
  if (typeof kind !== 'string' || kind.length === 0) return 'body.kind is not a non-empty string';
  return undefined;
}

function responseProblem(value: Fields): string | undefined {
  const hasBody = value['body'] !== undefined;
  const hasError = value['error'] !== undefined;
  if (hasBody === hasError) return 'a response carries exactly one of body and error';
  return hasBody ? bodyProblem(value['body']) : errorDataProblem(value['error']);
}

function errorDataProblem(error: unknown): string | undefined {
  if (!isRecord(error)) return 'error is not an object';
  // Any string is accepted as a code: a newer peer may know codes this node does not (they become INTERNAL).
  if (typeof error['code'] !== 'string' || error['code'].length === 0) return 'error.code is not a non-empty string';
  if (typeof error['message'] !== 'string') return 'error.message is not a string';
  const details = error['details'];
  if (details !== undefined && !isRecord(details)) return 'error.details is not an object';
  const executed = error['executed'];
  if (executed !== undefined && executed !== 'no') return 'error.executed is not "no"';
  const hint = error['hint'];
  if (hint !== undefined) {
    const problem = errorHintProblem(hint);
    if (problem !== undefined) return problem;
  }
  for (const key of Object.keys(error)) {
    if (key !== 'code' && key !== 'message' && key !== 'details' && key !== 'executed' && key !== 'hint') {
      return `unexpected field error.${key}`;
    }
  }
  return undefined;
}

function isRecord(value: unknown): value is Fields {
  return typeof value === 'object' && value !== null && !Array.isArray(value) && !(value instanceof Uint8Array);
}

/** Identity equality: same name and same ephemeral id. */
export function sameIdentity(a: NodeIdentity, b: NodeIdentity): boolean {
  return a.name === b.name && a.id === b.id;
}
