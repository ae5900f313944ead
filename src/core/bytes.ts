/** Byte helpers shared by the layers that hand bytes to Node APIs. */

/** `bytes` as a Node Buffer over the same memory (no copy); a Buffer is returned as is. */
export function bufferView(bytes: Uint8Array): Buffer {
  return Buffer.isBuffer(bytes) ? bytes : Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
}
