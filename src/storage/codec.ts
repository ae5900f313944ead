/**
 * The on-disk encoding of storage records and user values: msgpack (msgpackr, `useRecords: false`, so every record
 * decodes on its own without shared structures). bigint timestamps round-trip as bigint; binary values come back as
 * fresh copies (`copyBuffers`), always Buffers, so a caller mutating a returned one can never reach stored bytes.
 * This module is local to storage on purpose: storage may not import src/net.
 */
import { Packr } from 'msgpackr';
import { BasaltError } from '../core/errors.js';

const packr = new Packr({ useRecords: false, copyBuffers: true });
/** For row records only: their byte fields stay views into the record (never handed out; decoded again first). */
const viewPackr = new Packr({ useRecords: false, copyBuffers: false });

export function encode(value: unknown): Uint8Array {
  return packr.pack(value);
}

/** Decodes stored bytes; bytes that are not one msgpack value are corruption (STORAGE_CORRUPTED). */
export function decode(bytes: Uint8Array): unknown {
  return unpackWith(packr, bytes);
}

/**
 * Like `decode`, but binary fields are views into `bytes` instead of copies: for records (rows) whose nested values
 * are decoded once more before anything leaves storage, so a read does not copy every version of a row.
 */
export function decodeWithViews(bytes: Uint8Array): unknown {
  return unpackWith(viewPackr, bytes);
}

function unpackWith(unpacker: Packr, bytes: Uint8Array): unknown {
  try {
    // Byte arrays decode as the source's own type: from a Buffer view they are Buffers whatever the store handed
    // back (a Buffer from LMDB, a plain Uint8Array from memory), so a value's type never depends on where it was read.
    return unpacker.unpack(
      Buffer.isBuffer(bytes) ? bytes : Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength),
    );
  } catch (error) {
    throw new BasaltError('STORAGE_CORRUPTED', 'stored bytes are not valid msgpack', undefined, { cause: error });
  }
}

const utf8Decoder = new TextDecoder('utf-8', { fatal: true });

/** UTF-8 bytes of `text` (Buffer.from is several times faster than TextEncoder for short keys). */
export function utf8Bytes(text: string): Uint8Array {
  return Buffer.from(text, 'utf8');
}

export function utf8Text(bytes: Uint8Array): string {
  return utf8Decoder.decode(bytes);
}
