/** Byte helpers shared by the layers that hand bytes to Node APIs. */

/** `bytes` as a Node Buffer over the same memory (no copy); a Buffer is returned as is. */
export function bufferView(bytes: Uint8Array): Buffer {
  return Buffer.isBuffer(bytes) ? bytes : Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
}

/** `bytes` in an ArrayBuffer of their own, exactly their size (kept, a view of a larger buffer would keep all of it). */
export function ownedCopy(bytes: Uint8Array): Uint8Array {
  if (bytes.byteOffset === 0 && bytes.byteLength === bytes.buffer.byteLength) return bytes;
  const copy = new Uint8Array(bytes.byteLength);
  copy.set(bytes);
  return copy;
}
