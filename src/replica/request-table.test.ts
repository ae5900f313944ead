/**
 * The one request table: its type is a record over every request kind of tx/core/messages.ts (a kind without a handler
 * does not compile), and a table built from its parts answers every kind and registers exactly those kinds.
 */

import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { isBasaltError } from '../core/errors.js';
import type { NodeId, NodeIdentity, NodeName, PartitionId } from '../core/ids.js';
import { HybridClock } from '../hlc/hybrid-clock.js';
import { SimClock } from '../sim/clock.js';
import { Scheduler } from '../sim/scheduler.js';
import { LocalIntentResolver } from '../testing/local-intent-resolver.js';
import { TX_REQUEST_KINDS, type TxRequestKind, type TxStateResponse } from '../tx/core/messages.js';
import { makeTxId } from '../tx/core/tx-id.js';
import { TxStateMap } from '../tx/core/tx-state-map.js';
import { TxFinishHandler } from './handlers/tx-finish.js';
import { PartitionDirectory } from './partition/partition-directory.js';
import {
  dispatchTxRequest,
  registerTxRequests,
  type TxRequestHandler,
  type TxRequestTable,
  tableKinds,
  txRequestTable,
} from './request-table.js';

// Compile-time: the table's keys are exactly the protocol's request kinds.
type Equal<A, B> = [A] extends [B] ? ([B] extends [A] ? true : false) : false;
const exhaustive: Equal<keyof TxRequestTable, TxRequestKind> = true;
void exhaustive;

const FROM: NodeIdentity = { name: 'n2' as NodeName, id: 'n2-a' as NodeId };
const ANSWER: TxStateResponse = { kind: 'TxStateResponse', answer: { state: 'ABORTED' } };

function table(): { readonly table: TxRequestTable; readonly asked: string[]; readonly hlc: HybridClock } {
  const scheduler = new Scheduler({ seed: 1 });
  const physical = new SimClock(scheduler);
  const hlc = new HybridClock(physical, { maxClockSkewMs: 20 });
  const partitions = new PartitionDirectory();
  const asked: string[] = [];
  const built = txRequestTable({
    partitions,
    resolver: new LocalIntentResolver(new TxStateMap({ clock: physical })),
    finish: new TxFinishHandler({ partitions, cleanups: { ensureCleanup: () => Promise.resolve(true) } }),
    commitPartition: {
      handleStateRequest: async (request) => {
        asked.push(request.kind);
        return ANSWER;
      },
      handleRecovery: async (request) => {
        asked.push(request.kind);
        return ANSWER;
      },
    },
    coordinator: {
      handleStateRequest: async (request) => {
        asked.push(request.kind);
        return ANSWER;
      },
    },
  });
  return { table: built, asked, hlc };
}

describe('the request table', () => {
  it('a table that leaves a request kind without a handler does not compile', () => {
    const { table: full } = table();
    const { WriteConfirmRequest: dropped, ...rest } = full;
    // @ts-expect-error WriteConfirmRequest has no handler: the table's type requires every request kind.
    const incomplete: TxRequestTable = rest;
    assert.equal(Object.keys(incomplete).length, TX_REQUEST_KINDS.length - 1);
    const handler: TxRequestHandler<'WriteConfirmRequest'> = dropped;
    assert.equal(typeof handler, 'function');
  });

  it('has a handler for every request kind of tx/core/messages.ts, and for no other kind', () => {
    const { table: built } = table();
    assert.deepEqual([...tableKinds(built)].sort(), [...TX_REQUEST_KINDS].sort());
    for (const kind of TX_REQUEST_KINDS) assert.equal(typeof built[kind], 'function', `${kind} has a handler`);
  });

  it('registers every kind with a messenger-shaped registry in one call, and its undo unregisters them all', () => {
    const { table: built } = table();
    const registered = new Set<string>();
    const undo = registerTxRequests(
      {
        handle: (kind) => {
          assert.ok(!registered.has(kind), `${kind} registered once`);
          registered.add(kind);
          return () => registered.delete(kind);
        },
      },
      built,
    );
    assert.deepEqual([...registered].sort(), [...TX_REQUEST_KINDS].sort());
    undo();
    assert.equal(registered.size, 0);
  });

  it('routes the coordinator kind to the coordinator, the commit partition kinds to the commit partition', async () => {
    const { table: built, asked, hlc } = table();
    const txId = makeTxId({ beginTimestamp: hlc.now(), nodeId: FROM.id, counter: 1 });
    const readTs = hlc.now();
    const p0 = 't1p0' as PartitionId;
    await dispatchTxRequest(built, { kind: 'TxStateCoordinatorRequest', txId, readTs }, FROM);
    await dispatchTxRequest(
      built,
      { kind: 'TxRecoveryRequest', txId, commitPartitionId: p0, reporterPartitionId: p0 },
      FROM,
    );
    await dispatchTxRequest(
      built,
      {
        kind: 'TxStateCommitPartitionRequest',
        txId,
        commitPartitionId: p0,
        readTs,
        intentPartitionId: p0,
        key: 'k',
      },
      FROM,
    );
    assert.deepEqual(asked, ['TxStateCoordinatorRequest', 'TxRecoveryRequest', 'TxStateCommitPartitionRequest']);
  });

  it('answers a replica kind for a partition not in the directory with PRIMARY_MISS (not-hosted)', async () => {
    const { table: built, hlc } = table();
    const txId = makeTxId({ beginTimestamp: hlc.now(), nodeId: FROM.id, counter: 1 });
    await assert.rejects(
      dispatchTxRequest(built, { kind: 'WriteConfirmRequest', partitionId: 't9p9' as PartitionId, txId }, FROM),
      (e) => isBasaltError(e, 'PRIMARY_MISS') && e.details?.['reason'] === 'not-hosted',
    );
  });
});
