/**
 * The orphan detector's side of a recovery answer (DESIGN §2b rule 11), against a scripted request function: the
 * node reporting an orphan is not a replica of the tx's commit partition (so no FinishTx apply ever reaches its map),
 * and the final outcome the commit partition answers its TxRecoveryRequest with is the only news it gets. That answer
 * is what the compare-and-set stored, so it is cached; an UNKNOWN (below the vacuum horizon) never is.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { NodeName, PartitionId, TxId } from '../../core/ids.js';
import { at, COORDINATOR, ManualClock, txIdAt } from '../../testing/replica-support.js';
import type { TxRequest, TxStateAnswer, TxStateResponse } from '../../tx/core/messages.js';
import { TxStateMap, type TxStateMapEvent } from '../../tx/core/tx-state-map.js';
import { OrphanDetector } from './orphan-detector.js';

const COMMIT_PARTITION = 't1p3' as PartitionId;
const REPORTER = 't1p2' as PartitionId;
const COMMIT_PRIMARY = 'n2' as NodeName;

class Fixture {
  readonly clock = new ManualClock(1_000);
  readonly map = new TxStateMap({ clock: this.clock });
  readonly events: TxStateMapEvent[] = [];
  readonly sent: { to: NodeName; body: TxRequest }[] = [];
  private answered: () => void = () => {};
  /** Resolves once the scripted answer was handed back to the detector. */
  readonly answeredOnce = new Promise<void>((resolve) => {
    this.answered = resolve;
  });
  readonly detector: OrphanDetector;

  constructor(answer: TxStateAnswer) {
    this.map.observe((e) => this.events.push(e));
    this.detector = new OrphanDetector({
      txStates: this.map,
      // The reporter partition is not hosted here: only the map is in question.
      partitions: { get: () => undefined },
      cleanLocally: () => assert.fail('nothing is hosted here to clean'),
      peers: { isGone: (id) => id === COORDINATOR, nameOf: () => undefined },
      request: ((to: NodeName, body: TxRequest): Promise<TxStateResponse> => {
        this.sent.push({ to, body });
        this.answered();
        return Promise.resolve({ kind: 'TxStateResponse', answer });
      }) as never,
      locator: { locate: () => COMMIT_PRIMARY },
      physicalClock: this.clock,
      onError: (error) => assert.fail(String(error)),
    });
  }

  /** The tx as the sweep sees it before asking: PENDING here, its coordinator gone, so ABANDONED. */
  abandoned(tx: TxId): void {
    this.map.update(tx, { state: 'PENDING', reason: 'replica-touch', coordinatorId: COORDINATOR });
    this.map.update(tx, { state: 'ABANDONED', reason: 'coordinator-gone' });
  }

  async report(tx: TxId): Promise<void> {
    assert.equal(this.detector.requestRecovery(tx, COMMIT_PARTITION, REPORTER), true);
    await this.answeredOnce;
    // The answer is handled a few microtasks after the request function returned it.
    for (let i = 0; i < 10; i++) await Promise.resolve();
  }

  reasons(tx: TxId): string[] {
    return this.events.flatMap((e) =>
      e.kind === 'update' && e.txId === tx && e.outcome === 'applied' ? [e.reason] : [],
    );
  }
}

describe('orphan detection: the answer to a recovery request', () => {
  it('rule 11: a COMMITTED answer is cached with its commitTs (recovery-answer), so the next reader finds it final here', async () => {
    const commitTs = at(900);
    const f = new Fixture({ state: 'COMMITTED', commitTs });
    const tx = txIdAt(500);
    f.abandoned(tx);
    await f.report(tx);
    assert.equal(f.sent.length, 1);
    assert.deepEqual(f.sent[0]?.body, {
      kind: 'TxRecoveryRequest',
      txId: tx,
      commitPartitionId: COMMIT_PARTITION,
      reporterPartitionId: REPORTER,
    });
    const entry = f.map.entry(tx);
    assert.equal(entry?.state, 'COMMITTED');
    assert.equal(entry?.commitTimestamp, commitTs);
    assert.equal(entry?.commitPartitionId, COMMIT_PARTITION);
    assert.equal(f.reasons(tx).at(-1), 'recovery-answer');
  });

  it('an ABORTED answer (the recovery aborted the orphan) is cached', async () => {
    const f = new Fixture({ state: 'ABORTED' });
    const tx = txIdAt(500);
    f.abandoned(tx);
    await f.report(tx);
    assert.equal(f.map.entry(tx)?.state, 'ABORTED');
    assert.equal(f.reasons(tx).at(-1), 'recovery-answer');
  });

  it('rule 16: an UNKNOWN answer (below the vacuum horizon) is not cached: the entry stays ABANDONED', async () => {
    const f = new Fixture({ state: 'UNKNOWN' });
    const tx = txIdAt(500);
    f.abandoned(tx);
    await f.report(tx);
    assert.equal(f.map.entry(tx)?.state, 'ABANDONED');
    assert.ok(!f.reasons(tx).includes('recovery-answer'));
  });
});
