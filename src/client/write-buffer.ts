/**
 * The writes of a read-write transaction kept until its commit, which carries them (`commitWith`): a transfer then
 * costs one request less to its coordinator, and the coordinator can carry the commit partition's writes in the
 * finish itself (DESIGN §4b "Fewer rounds per commit"). Used by the TCP client (ConnectOptions.bufferWrites) and the
 * embedded one (ClientOptions.bufferWrites).
 *
 * Each write is checked as the node would check it when it is made (a bad key or value fails the `put`, not the
 * commit) and its value copied, so that a caller changing the object afterwards does not change what commits. A read
 * or scan of the transaction first sends what was kept (`flush`), so that it reads its own writes; so does a buffer
 * past LIMITS.txBatchKeysMax writes or half a frame of bytes, which keeps memory and the commit's frame bounded.
 */
import { BasaltError } from '../core/errors.js';
import { LIMITS } from '../core/limits.js';
import { decode } from '../net/codec.js';
import type { Value } from '../storage/mv-partition-storage.js';
import { checkEncodedValue, checkEntries, checkKey, type KeyValue, type TxWrite } from '../tx/core/user-input.js';

/** Bytes of kept writes (keys and encoded values) at which they are sent ahead of the commit. */
const BUFFERED_BYTES_MAX = LIMITS.frameBytesMax / 2;

/** How kept writes are sent ahead of the commit: a run of puts to one table, or one removal. */
export interface WriteSink {
  putAll(table: string, entries: readonly KeyValue[]): Promise<void>;
  remove(table: string, key: string): Promise<void>;
}

export class WriteBuffer {
  private writes: TxWrite[] = [];
  private bytes = 0;
  private closed = false;

  constructor(
    /** The transaction's id, for errors (a lazy one has none before it began). */
    private readonly txName: () => string,
    private readonly sink: WriteSink,
  ) {}

  async put(table: string, key: string, value: Value): Promise<void> {
    checkKey(key);
    const kept = keptValue(value);
    return this.keep([{ table, key, value: kept.value }], key.length + kept.bytes);
  }

  async putAll(table: string, entries: readonly KeyValue[]): Promise<void> {
    if (!Array.isArray(entries)) checkEntries(entries);
    let bytes = 0;
    const writes = entries.map((e) => {
      checkKey(e?.key);
      const kept = keptValue(e.value);
      bytes += e.key.length + kept.bytes;
      return { table, key: e.key, value: kept.value };
    });
    return this.keep(writes, bytes);
  }

  async remove(table: string, key: string): Promise<void> {
    checkKey(key);
    return this.keep([{ table, key }], key.length);
  }

  /** Sends what was kept, in order: each run of puts to one table as a putAll, each removal alone. */
  async flush(): Promise<void> {
    while (this.writes.length > 0) {
      const writes = this.take();
      let i = 0;
      while (i < writes.length) {
        const first = writes[i]!;
        if (first.value === undefined) {
          await this.sink.remove(first.table, first.key);
          i++;
          continue;
        }
        const entries: KeyValue[] = [];
        for (; i < writes.length; i++) {
          const w = writes[i]!;
          if (w.value === undefined || w.table !== first.table || entries.length >= LIMITS.txBatchKeysMax) break;
          entries.push({ key: w.key, value: w.value });
        }
        await this.sink.putAll(first.table, entries);
      }
    }
  }

  /** The kept writes, for the commit that carries them; nothing more may be kept after it. */
  close(): TxWrite[] {
    this.closed = true;
    return this.take();
  }

  private take(): TxWrite[] {
    const writes = this.writes;
    this.writes = [];
    this.bytes = 0;
    return writes;
  }

  private async keep(writes: readonly TxWrite[], bytes: number): Promise<void> {
    if (this.closed) {
      const txId = this.txName();
      throw new BasaltError('TX_ALREADY_FINISHED', `tx ${txId} is finished or finishing`, { txId });
    }
    for (const w of writes) this.writes.push(w);
    this.bytes += bytes;
    if (this.writes.length >= LIMITS.txBatchKeysMax || this.bytes >= BUFFERED_BYTES_MAX) await this.flush();
  }
}

/** A value checked as the node would check it, and copied (decoded from its encoding). */
function keptValue(value: Value): { readonly value: Value; readonly bytes: number } {
  const encoded = checkEncodedValue(value);
  return { value: decode(encoded) as Value, bytes: encoded.length };
}
