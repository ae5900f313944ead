/**
 * Scans that stream: a range of any size read page by page, each page one `scan` of at most `pageSize` new rows that
 * continues from the last key of the page before, so client and node hold one page at a time.
 * In a read-only transaction every page reads the same snapshot; in a read-write one every page locks its own range
 * (up to the first key not returned, rule 18), so together they lock the whole range read: either way the pages
 * form one consistent scan. Keys sort by code point (storage order), so a prefix is the range from the prefix to
 * its successor.
 */
import { invalidArgument } from '../core/errors.js';
import { LIMITS } from '../core/limits.js';
import type { KeyValue, ScanRange } from '../tx/core/user-input.js';

/** What a page reads with: any transaction, embedded or remote. */
/** What `scanPages` reads from: a transaction. */
export interface ScanSource {
  /** One page: as {@link Transaction.scan}. */
  scan(table: string, range: ScanRange, options?: { readonly limit?: number }): Promise<KeyValue[]>;
}

/** Options of {@link scanPages}. */
export interface ScanPagesOptions {
  /** Rows per page (default 1,000; at most LIMITS.storageScanRowsMax). */
  readonly pageSize?: number;
}

export const SCAN_PAGE_SIZE_DEFAULT = 1_000;

/** The pages of `range` in key order; each is non-empty, and the iteration ends after the last row. */
export async function* scanPages(
  tx: ScanSource,
  table: string,
  range: ScanRange,
  options: ScanPagesOptions = {},
): AsyncGenerator<KeyValue[], void, undefined> {
  const pageSize = options.pageSize ?? SCAN_PAGE_SIZE_DEFAULT;
  if (!Number.isInteger(pageSize) || pageSize < 1 || pageSize > LIMITS.storageScanRowsMax) {
    throw invalidArgument(`a page size is an integer in [1, ${LIMITS.storageScanRowsMax}]`, { pageSize });
  }
  const bounds = boundsOf(range);
  let start = bounds.start;
  // The last key read: the next page starts at it (a key one byte longer could pass the key size limit) and skips it.
  let after: string | undefined;
  for (;;) {
    const want = after === undefined ? pageSize : Math.min(pageSize + 1, LIMITS.storageScanRowsMax);
    const rows = await tx.scan(
      table,
      { ...(start !== undefined && { start }), ...(bounds.end !== undefined && { end: bounds.end }) },
      { limit: want },
    );
    const page = after !== undefined && rows[0]?.key === after ? rows.slice(1) : rows;
    if (page.length > 0) yield page;
    if (rows.length < want) return;
    after = rows[rows.length - 1]!.key;
    start = after;
  }
}

/** The `[start, end)` bounds of a range; a prefix's end is its successor (undefined: no key sorts after it). */
export function boundsOf(range: ScanRange): { readonly start?: string; readonly end?: string } {
  if (!('prefix' in range)) return range;
  const end = prefixSuccessor(range.prefix);
  return { start: range.prefix, ...(end !== undefined && { end }) };
}

/** The smallest key greater than every key that starts with `prefix`, by code point; undefined if there is none. */
export function prefixSuccessor(prefix: string): string | undefined {
  const points = [...prefix];
  while (points.length > 0) {
    const last = points.pop()!.codePointAt(0)!;
    if (last < 0x10ffff) {
      // Surrogate code points are not characters: the next one after U+D7FF is U+E000.
      const next = last + 1 === 0xd800 ? 0xe000 : last + 1;
      return points.join('') + String.fromCodePoint(next);
    }
  }
  return undefined;
}
