/**
 * Harness network control (DESIGN §4): hold, drop and count messages by `{ kind, from, to, group }`. A filter's
 * missing fields match anything; `kind` is the message body's kind (`TxFinishRequest`, `Raft`, ...), `group` the Raft
 * group of a `Raft` message, `from`/`to` node names. Responses carry their own body kinds, so a request filter does not
 * catch its responses (a `{ from }` filter catches everything that node sends).
 *
 * Real transports get this by wrapping each node's Transport (`NetworkFilters.wrap`); the simulator applies the same
 * predicate through its own network's filters. A `RaftBatch` is seen as the `Raft` messages it carries (`unbatched`):
 * each is logged for `count`, and if a rule would catch any of them, each goes (or is held or dropped) on its own;
 * otherwise the batch goes whole. Rules act at send time: a dropped message is lost, a held message is
 * kept until `release()` and then sent in its original order (if its sender still runs). Every send is logged (kind,
 * group, from, to) for `count`, up to `sentLogMax`; past that `count` refuses to answer rather than under-count.
 */
import { assert } from '../core/assert.js';
import { BasaltError } from '../core/errors.js';
import type { NodeIdentity, NodeName } from '../core/ids.js';
import type { Transport, TransportHandler } from '../env/transport.js';

/** Which messages a hold, drop or count matches: every field given must match (none given: every message). */
export interface NetworkFilter {
  /** The message kind (`TxFinishRequest`, `Raft`, …). */
  readonly kind?: string;
  /** The sending node. */
  readonly from?: string;
  /** The receiving node. */
  readonly to?: string;
  /** The Raft group of a Raft message (`t1p5`, `meta`). */
  readonly group?: string;
}

/** Messages held back by `network.hold`, until released. */
export interface HeldMessages {
  /** Messages held so far. */
  readonly heldCount: number;
  /** Sends every held message in order and stops holding; returns how many were sent. */
  release(): number;
}

/** Messages dropped by `network.drop`, until undone. */
export interface DroppedMessages {
  /** Messages dropped so far. */
  readonly droppedCount: number;
  /** Stops dropping. */
  undo(): void;
}

/** The network between a harness cluster's nodes (`cluster.network`). */
export interface ClusterNetwork {
  /** Holds back the matching messages until `release()`. */
  hold(filter: NetworkFilter): HeldMessages;
  /** Drops the matching messages until `undo()`. */
  drop(filter: NetworkFilter): DroppedMessages;
  /** Messages sent so far that match `filter`. */
  count(filter?: NetworkFilter): number;
}

/** The body of a messenger envelope, if the payload is one. */
function bodyOf(payload: unknown): Record<string, unknown> | undefined {
  if (typeof payload !== 'object' || payload === null) return undefined;
  const body = (payload as { body?: unknown }).body;
  return typeof body === 'object' && body !== null ? (body as Record<string, unknown>) : undefined;
}

export function payloadKind(payload: unknown): string | undefined {
  const kind = bodyOf(payload)?.['kind'];
  return typeof kind === 'string' ? kind : undefined;
}

export function payloadGroup(payload: unknown): string | undefined {
  const group = bodyOf(payload)?.['group'];
  return typeof group === 'string' ? group : undefined;
}

/**
 * The messages a payload carries as filters see them: a `RaftBatch` envelope as one `Raft` envelope per message it
 * carries (same sender, type and timestamp), in order; any other payload as itself.
 */
export function unbatched(payload: unknown): readonly unknown[] {
  const body = bodyOf(payload);
  const messages = body?.['kind'] === 'RaftBatch' ? body['messages'] : undefined;
  if (!Array.isArray(messages)) return [payload];
  return messages.map((part: unknown) => ({ ...(payload as object), body: { kind: 'Raft', ...(part as object) } }));
}

/** The kind/group part of a filter (from/to are matched by whoever knows the endpoints). */
export function matchesPayload(filter: NetworkFilter, payload: unknown): boolean {
  return (
    (filter.kind === undefined || filter.kind === payloadKind(payload)) &&
    (filter.group === undefined || filter.group === payloadGroup(payload))
  );
}

export function matchesFilter(filter: NetworkFilter, from: string, to: string, payload: unknown): boolean {
  return (
    (filter.from === undefined || filter.from === from) &&
    (filter.to === undefined || filter.to === to) &&
    matchesPayload(filter, payload)
  );
}

/** Throws INVALID_ARGUMENT for a filter with fields other than kind, from, to, group. */
export function checkFilter(filter: NetworkFilter): void {
  for (const key of Object.keys(filter)) {
    if (key !== 'kind' && key !== 'from' && key !== 'to' && key !== 'group') {
      throw new BasaltError('INVALID_ARGUMENT', `unknown network filter field ${key}`);
    }
  }
}

interface SentRecord {
  readonly from: string;
  readonly to: string;
  readonly kind: string | undefined;
  readonly group: string | undefined;
}

interface HeldMessage {
  readonly via: FilteringTransport;
  readonly to: NodeName;
  readonly payload: unknown;
}

interface HoldRule {
  readonly filter: NetworkFilter;
  readonly held: HeldMessage[];
}

interface DropRule {
  readonly filter: NetworkFilter;
  dropped: number;
}

const SENT_LOG_MAX_DEFAULT = 1_000_000;
/** Messages one hold rule keeps; a test that holds more has forgotten to release. */
const HELD_MESSAGES_MAX = 1_000_000;

export class NetworkFilters implements ClusterNetwork {
  private readonly holdRules: HoldRule[] = [];
  private readonly dropRules: DropRule[] = [];
  private readonly sent: SentRecord[] = [];
  private overflow = false;

  constructor(private readonly sentLogMax = SENT_LOG_MAX_DEFAULT) {}

  wrap(transport: Transport): Transport {
    return new FilteringTransport(transport, this);
  }

  hold(filter: NetworkFilter): HeldMessages {
    checkFilter(filter);
    const rule: HoldRule = { filter, held: [] };
    this.holdRules.push(rule);
    return {
      get heldCount() {
        return rule.held.length;
      },
      release: () => {
        remove(this.holdRules, rule);
        const batch = rule.held.splice(0);
        for (const m of batch) m.via.transmit(m.to, m.payload);
        return batch.length;
      },
    };
  }

  drop(filter: NetworkFilter): DroppedMessages {
    checkFilter(filter);
    const rule: DropRule = { filter, dropped: 0 };
    this.dropRules.push(rule);
    return {
      get droppedCount() {
        return rule.dropped;
      },
      undo: () => remove(this.dropRules, rule),
    };
  }

  count(filter: NetworkFilter = {}): number {
    checkFilter(filter);
    if (this.overflow) {
      throw new BasaltError('INVALID_ARGUMENT', 'network count needs the send log, which overflowed', {
        sentLogMax: this.sentLogMax,
      });
    }
    let n = 0;
    for (const s of this.sent) {
      if (
        (filter.from === undefined || filter.from === s.from) &&
        (filter.to === undefined || filter.to === s.to) &&
        (filter.kind === undefined || filter.kind === s.kind) &&
        (filter.group === undefined || filter.group === s.group)
      ) {
        n++;
      }
    }
    return n;
  }

  /** @internal Decides the fate of one send: true to send it as it is; false if it was dropped, held or split here. */
  route(via: FilteringTransport, to: NodeName, payload: unknown): boolean {
    const from = via.self.name;
    const parts = unbatched(payload);
    for (const part of parts) this.log(from, to, part);
    if (parts.length === 1) return this.decide(via, to, payload);
    if (!parts.some((part) => this.catches(from, to, part))) return true;
    for (const part of parts) if (this.decide(via, to, part)) via.transmit(to, part);
    return false;
  }

  private catches(from: string, to: string, payload: unknown): boolean {
    const caught = (rule: { readonly filter: NetworkFilter }): boolean => matchesFilter(rule.filter, from, to, payload);
    return this.dropRules.some(caught) || this.holdRules.some(caught);
  }

  /** True to send `payload` now; false if a rule dropped or held it. */
  private decide(via: FilteringTransport, to: NodeName, payload: unknown): boolean {
    const from = via.self.name;
    for (const rule of this.dropRules) {
      if (matchesFilter(rule.filter, from, to, payload)) {
        rule.dropped++;
        return false;
      }
    }
    for (const rule of this.holdRules) {
      if (matchesFilter(rule.filter, from, to, payload)) {
        assert(rule.held.length < HELD_MESSAGES_MAX, 'a hold rule kept too many messages: release it');
        rule.held.push({ via, to, payload });
        return false;
      }
    }
    return true;
  }

  private log(from: string, to: string, payload: unknown): void {
    if (this.sent.length >= this.sentLogMax) {
      this.overflow = true;
      return;
    }
    this.sent.push({ from, to, kind: payloadKind(payload), group: payloadGroup(payload) });
  }
}

/** A node's Transport seen through the cluster's filters. */
export class FilteringTransport implements Transport {
  readonly self: NodeIdentity;
  private closed = false;

  constructor(
    private readonly inner: Transport,
    private readonly filters: NetworkFilters,
  ) {
    this.self = inner.self;
  }

  send(to: NodeName, payload: unknown): void {
    if (this.closed) return;
    if (this.filters.route(this, to, payload)) this.inner.send(to, payload);
  }

  /** @internal Sends a released message, unless this incarnation has closed since. */
  transmit(to: NodeName, payload: unknown): void {
    if (!this.closed) this.inner.send(to, payload);
  }

  setHandler(handler: TransportHandler): void {
    this.inner.setHandler(handler);
  }

  close(): Promise<void> {
    this.closed = true;
    return this.inner.close();
  }
}

function remove<T>(list: T[], item: T): void {
  const i = list.indexOf(item);
  if (i >= 0) list.splice(i, 1);
}
