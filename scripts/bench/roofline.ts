// The bandwidth roofline of decode: a streaming read over a buffer much larger than the caches,
// measured in this process (WebAssembly SIMD, the instruction set onnxruntime-web's kernels use; one
// thread), against the bytes one decode step must read: every weight once, plus the KV cache of
// every sequence in the batch.
import { statSync } from 'node:fs';

/**
 * A hand-assembled WebAssembly module: `sum(from, to)` ORs every 16-byte vector of memory[from, to)
 * into eight accumulators (v128.or: one-cycle latency, so the loop is bound by loads, not by adds) and
 * returns one lane, so the loads cannot be optimised away.
 */
function streamingReadModule(): Uint8Array<ArrayBuffer> {
  const u32 = (n: number): number[] => {
    const out: number[] = [];
    do {
      let b = n & 0x7f;
      n >>>= 7;
      if (n) b |= 0x80;
      out.push(b);
    } while (n);
    return out;
  };
  const section = (id: number, body: number[]): number[] => [id, ...u32(body.length), ...body];
  const ACC = 8; // locals 2..9 are v128 accumulators
  const body: number[] = [0x01, ACC, 0x7b]; // ACC locals of type v128
  body.push(0x03, 0x40); // loop
  for (let a = 0; a < ACC; a++) {
    body.push(0x20, 2 + a, 0x20, 0x00, 0xfd, 0x00, 0x04, ...u32(a * 16)); // acc, v128.load offset=16a
    body.push(0xfd, 0x50, 0x21, 2 + a); // v128.or; local.set acc
  }
  body.push(0x20, 0x00, 0x41, ...[0x80, 0x01], 0x6a, 0x22, 0x00); // p += 128 (i32.const 128), local.tee p
  body.push(0x20, 0x01, 0x49, 0x0d, 0x00, 0x0b); // p < to: br_if loop; end
  body.push(0x20, 2);
  for (let a = 1; a < ACC; a++) body.push(0x20, 2 + a, 0xfd, 0x50);
  body.push(0xfd, 0x1b, 0x00, 0x0b); // i32x4.extract_lane 0; end
  const code = [0x01, ...u32(body.length), ...body];
  return Uint8Array.from([
    0x00,
    0x61,
    0x73,
    0x6d,
    0x01,
    0x00,
    0x00,
    0x00,
    ...section(1, [0x01, 0x60, 0x02, 0x7f, 0x7f, 0x01, 0x7f]), // type (i32, i32) -> i32
    ...section(3, [0x01, 0x00]),
    ...section(5, [0x01, 0x00, 0x01]), // memory, min 1 page
    ...section(7, [0x02, 0x03, 0x73, 0x75, 0x6d, 0x00, 0x00, 0x03, 0x6d, 0x65, 0x6d, 0x02, 0x00]), // "sum", "mem"
    ...section(10, code),
  ]);
}

export interface BandwidthMeter {
  /** One streaming read over the whole buffer: bytes per second. */
  measure(): number;
}

/** A meter over `bytes` (default 1 GiB: far past any cache). */
export function createBandwidthMeter(bytes = 2 ** 30): BandwidthMeter {
  const instance = new WebAssembly.Instance(new WebAssembly.Module(streamingReadModule()));
  const mem = instance.exports.mem as WebAssembly.Memory;
  const sum = instance.exports.sum as (from: number, to: number) => number;
  mem.grow(bytes / 65536);
  new Uint8Array(mem.buffer).fill(1); // touch every page, so the read measures memory, not page faults
  for (let i = 0; i < 3; i++) sum(0, 2 ** 20); // let the compiler tier up
  return {
    measure() {
      let best = Infinity;
      // Best of three passes of one measurement: the pass least disturbed by neighbours.
      for (let i = 0; i < 3; i++) {
        const t0 = performance.now();
        sum(0, bytes);
        best = Math.min(best, performance.now() - t0);
      }
      return (bytes * 1000) / best;
    },
  };
}

/** Bytes of weights one forward pass reads: the ONNX file (all but a few KB of it is initializers). */
export function weightBytes(onnxFile: string): number {
  return statSync(onnxFile).size;
}

/** Bytes one decode step must read at `batch` sequences of `context` tokens each. */
export function decodeStepBytes(weights: number, kvBytesPerToken: number, batch: number, context: number): number {
  return weights + batch * kvBytesPerToken * context;
}
