/**
 * Framing on a byte stream: each frame is a 4-byte big-endian payload length followed by that many bytes of msgpack.
 * `FrameDecoder` is a pure state machine fed with whatever chunks the socket delivers; it yields whole frames in
 * order and stops for good at the first length above the limit (the connection is then closed, so nothing after
 * the bad prefix can be trusted). Frames never alias one another; they may alias the chunks they came from.
 */
import { assert } from '../core/assert.js';
import { BasaltError } from '../core/errors.js';
import { encode } from './codec.js';

export const FRAME_HEADER_BYTES = 4;

/** The bytes of one frame carrying `payload`: [header, body]. Throws MALFORMED_FRAME or FRAME_TOO_LARGE. */
export function encodeFrame(payload: unknown, frameBytesMax: number): readonly [Buffer, Buffer] {
  const body = encode(payload);
  if (body.length > frameBytesMax) {
    throw new BasaltError('FRAME_TOO_LARGE', `a ${body.length}-byte frame exceeds ${frameBytesMax} bytes`, {
      frameBytes: body.length,
      frameBytesMax,
    });
  }
  const header = Buffer.allocUnsafe(FRAME_HEADER_BYTES);
  header.writeUInt32BE(body.length, 0);
  return [header, body];
}

export type FrameDecoderOutput =
  | { readonly ok: true; readonly frames: readonly Buffer[] }
  | { readonly ok: false; readonly frames: readonly Buffer[]; readonly frameBytes: number };

const NOTHING: FrameDecoderOutput = { ok: true, frames: [] };

export class FrameDecoder {
  private readonly chunks: Buffer[] = [];
  private bufferedBytes = 0;
  /** Length of the frame whose header was read, or -1 while waiting for a header. */
  private expectedBytes = -1;
  private failed = false;

  constructor(private readonly frameBytesMax: number) {}

  /** Adds a chunk; returns the frames it completed, or the oversized length that poisoned the stream. */
  push(chunk: Buffer): FrameDecoderOutput {
    if (this.failed) return NOTHING;
    this.chunks.push(chunk);
    this.bufferedBytes += chunk.length;
    const frames: Buffer[] = [];
    for (;;) {
      if (this.expectedBytes < 0) {
        if (this.bufferedBytes < FRAME_HEADER_BYTES) break;
        const length = this.take(FRAME_HEADER_BYTES).readUInt32BE(0);
        if (length > this.frameBytesMax) {
          this.failed = true;
          this.chunks.length = 0;
          return { ok: false, frames, frameBytes: length };
        }
        this.expectedBytes = length;
      }
      if (this.bufferedBytes < this.expectedBytes) break;
      const frame = this.take(this.expectedBytes);
      assert(frame.length === this.expectedBytes, 'a frame is exactly its header length');
      frames.push(frame);
      this.expectedBytes = -1;
    }
    assert(this.expectedBytes <= this.frameBytesMax, 'a pending frame length is within the limit');
    return { ok: true, frames };
  }

  /** Bytes received but not yet part of a whole frame. */
  get pendingBytes(): number {
    return this.bufferedBytes;
  }

  private take(length: number): Buffer {
    assert(length <= this.bufferedBytes, 'a frame is taken only once all its bytes arrived');
    this.bufferedBytes -= length;
    const first = this.chunks[0];
    if (first !== undefined && first.length >= length) {
      if (first.length === length) this.chunks.shift();
      else this.chunks[0] = first.subarray(length);
      return first.subarray(0, length);
    }
    const out = Buffer.allocUnsafe(length);
    let filled = 0;
    while (filled < length) {
      const chunk = this.chunks[0]!;
      const used = Math.min(chunk.length, length - filled);
      chunk.copy(out, filled, 0, used);
      filled += used;
      if (used === chunk.length) this.chunks.shift();
      else this.chunks[0] = chunk.subarray(used);
    }
    return out;
  }
}
