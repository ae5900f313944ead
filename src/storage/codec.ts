/**
 * The on-disk encoding of storage records and user values: msgpack (msgpackr, `useRecords: false`, so every record
 * decodes on its own without shared structures). bigint timestamps round-trip as bigint; binary values come back as
 * fresh copies (`copyBuffers`), so a caller mutating a returned Uint8Array can never reach stored bytes.
 * This module is local to storage on purpose: storage may not import src/net.
 */
import { Packr } from 'msgpackr';
import { BasaltError } from '../core/errors.js';

const packr = new Packr({ useRecords: false, copyBuffers: true });

export function encode(value: unknown): Uint8Array {
  return packr.pack(value);
}

/** Decodes stored bytes; bytes that are not one msgpack value are corruption (STORAGE_CORRUPTED). */
export function decode(bytes: Uint8Array): unknown {
  try {
    return packr.unpack(bytes);
  } catch (error) {
    throw new BasaltError('STORAGE_CORRUPTED', 'stored bytes are not valid msgpack', undefined, { cause: error });
  }
}

const utf8 = new TextEncoder();
const utf8Decoder = new TextDecoder('utf-8', { fatal: true });

export function utf8Bytes(text: string): Uint8Array {
  return utf8.encode(text);
}

export function utf8Text(bytes: Uint8Array): string {
  return utf8Decoder.decode(bytes);
}
