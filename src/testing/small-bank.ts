/**
 * Helpers shared by the multi-process tests (not shipped in the package): the small bank and its check.
 */
import assert from 'node:assert/strict';
import type { RemoteClient } from '../client/remote.js';

/** The bank of the multi-process tests: transfers of one unit between two accounts, each leaving a record. */
export const SMALL_BANK = {
  table: 'bank',
  accounts: 6,
  initialBalance: 100,
  account: (i: number): string => `acct/${i}`,
  /** The two distinct accounts transfer `id` moves one unit between. */
  ends: (id: number): [number, number] => [id % 6, (id + 1 + (id % 5)) % 6],
} as const;

export interface BankCheck {
  readonly table: string;
  readonly accounts: number;
  readonly initialBalance: number;
  /** Account i's key. */
  readonly account: (i: number) => string;
  /** The two accounts transfer `id` moves one unit between (from, to). */
  readonly ends: (id: number) => readonly [number, number];
  /** Transfers whose commit was acknowledged, and those whose outcome the client could not learn. */
  readonly acknowledged: readonly number[];
  readonly unknown: readonly number[];
}

/**
 * Reads the bank in one RO transaction and checks it: every acknowledged transfer's record is there, the balances are
 * moved by exactly the transfers whose record exists (acknowledged or unknown), and the total is conserved.
 */
export async function checkBank(client: Pick<RemoteClient, 'transaction'>, bank: BankCheck): Promise<void> {
  const ids = [...bank.acknowledged, ...bank.unknown];
  const state = await client.transaction(
    async (tx) => ({
      balances: (await tx.getAll(
        bank.table,
        Array.from({ length: bank.accounts }, (_, i) => bank.account(i)),
      )) as number[],
      records: await tx.getAll(
        bank.table,
        ids.map((id) => `xfer/${id}`),
      ),
    }),
    { retries: 100, readOnly: true },
  );
  for (const [i, id] of bank.acknowledged.entries()) {
    assert.equal(state.records[i], id, `acknowledged transfer ${id} is there`);
  }
  const expected = Array.from({ length: bank.accounts }, () => bank.initialBalance);
  for (const [i, id] of ids.entries()) {
    if (state.records[i] === undefined) continue;
    const [from, to] = bank.ends(id);
    expected[from]! -= 1;
    expected[to]! += 1;
  }
  assert.deepEqual(state.balances, expected, 'the balances are moved by exactly the transfers that applied');
  assert.equal(
    state.balances.reduce((sum, b) => sum + b, 0),
    bank.accounts * bank.initialBalance,
    'the total is conserved',
  );
}
