/**
 * The bank checker. Transfers move a fixed `amount` between two accounts in one RW transaction that fails (takes no
 * effect) when the source holds less; reads return every balance from one snapshot. Properties:
 *   - every committed read sums exactly to the total, and shows no negative balance (a snapshot never sees half a
 *     transfer, and serializable transfers never overdraw);
 *   - the final read (the last one started after every acknowledged transfer completed) is the initial balances plus
 *     every acknowledged transfer plus some subset of the indeterminate ones: no acknowledged transfer was lost, no
 *     transfer applied twice, none that failed applied.
 */
import { type Completed, indeterminate, type Operation, pairOperations, type Transfer } from './history.js';

export type BankAnomalyKind = 'wrong-total' | 'negative-balance' | 'unexplained-final' | 'no-final-read';

export interface BankAnomaly {
  readonly kind: BankAnomalyKind;
  readonly message: string;
  /** History index of the read (invocation) involved, if any. */
  readonly op?: number;
}

export interface BankResult {
  readonly valid: boolean;
  readonly anomalies: readonly BankAnomaly[];
  readonly counts: { readonly reads: number; readonly ok: number; readonly fail: number; readonly info: number };
}

export interface BankModel {
  readonly accounts: readonly string[];
  readonly initialBalance: number;
}

/** Indeterminate transfers above this many are not enumerated: the final read is then checked by its total only. */
export const UNCERTAIN_ENUMERATION_MAX = 16;

type BankOp = Extract<Operation, { f: 'read' | 'transfer' }>;

export function checkBank(history: readonly Operation[], model: BankModel): BankResult {
  const pairs = pairOperations(history.filter((op): op is BankOp => op.f === 'read' || op.f === 'transfer'));
  const total = model.accounts.length * model.initialBalance;
  const anomalies: BankAnomaly[] = [];
  const reads = pairs.filter((p) => p.invoke.f === 'read' && p.complete?.type === 'ok');
  for (const read of reads) checkRead(read, model, total, anomalies);
  const transfers = pairs.filter((p) => p.invoke.f === 'transfer');
  const acknowledged = transfers.filter((p) => p.complete?.type === 'ok').map((p) => p.invoke.value as Transfer);
  const uncertain = transfers.filter(indeterminate).map((p) => p.invoke.value as Transfer);
  // The final read must have started after every acknowledged transfer completed, so it contains them all.
  const lastAckNs = transfers.reduce((m, p) => (p.complete?.type === 'ok' ? Math.max(m, p.complete.time) : m), -1);
  const final = reads.filter((r) => r.invoke.time > lastAckNs).pop();
  if (final === undefined) {
    anomalies.push({
      kind: 'no-final-read',
      message: 'no read started after the last acknowledged transfer completed: balances cannot be checked',
    });
  } else if (uncertain.length <= UNCERTAIN_ENUMERATION_MAX) {
    const balances = final.complete!.value as Readonly<Record<string, number>>;
    if (!explained(balances, model, acknowledged, uncertain)) {
      anomalies.push({
        kind: 'unexplained-final',
        message:
          `final balances ${JSON.stringify(balances)} are not the result of the ${acknowledged.length} acknowledged ` +
          `transfers plus any subset of the ${uncertain.length} indeterminate ones`,
        op: final.invoke.index,
      });
    }
  }
  return {
    valid: anomalies.length === 0,
    anomalies,
    counts: {
      reads: reads.length,
      ok: acknowledged.length,
      fail: transfers.filter((p) => p.complete?.type === 'fail').length,
      info: uncertain.length,
    },
  };
}

function checkRead(read: Completed<BankOp>, model: BankModel, total: number, anomalies: BankAnomaly[]): void {
  const balances = read.complete!.value as Readonly<Record<string, number>>;
  const values = model.accounts.map((a) => balances[a]);
  const sum = values.reduce<number>((s, v) => s + (v ?? Number.NaN), 0);
  if (sum !== total) {
    anomalies.push({
      kind: 'wrong-total',
      message: `read ${JSON.stringify(balances)} sums to ${sum}, not ${total}`,
      op: read.invoke.index,
    });
  }
  const negative = model.accounts.filter((a) => (balances[a] ?? 0) < 0);
  if (negative.length > 0) {
    anomalies.push({
      kind: 'negative-balance',
      message: `read ${JSON.stringify(balances)} shows negative balances on ${negative.join(', ')}`,
      op: read.invoke.index,
    });
  }
}

function explained(
  balances: Readonly<Record<string, number>>,
  model: BankModel,
  acknowledged: readonly Transfer[],
  uncertain: readonly Transfer[],
): boolean {
  const index = new Map(model.accounts.map((a, i) => [a, i]));
  const base = model.accounts.map(() => model.initialBalance);
  const apply = (v: number[], t: Transfer): void => {
    v[index.get(t.from)!]! -= t.amount;
    v[index.get(t.to)!]! += t.amount;
  };
  for (const t of acknowledged) apply(base, t);
  const target = model.accounts.map((a) => balances[a]);
  for (let mask = 0; mask < 1 << uncertain.length; mask++) {
    const v = [...base];
    uncertain.forEach((t, i) => {
      if (mask & (1 << i)) apply(v, t);
    });
    if (v.every((b, i) => b === target[i])) return true;
  }
  return false;
}
