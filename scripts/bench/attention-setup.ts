// One decode step's attention over an 8-bit KV pool, laid out in the kernels' memory and ready to call: what
// products.ts times in Node and products-workerd-worker.ts in workerd. bench-135m's shape (9 query heads on 3 KV
// heads, head_dim 64, blocks of 16 tokens), `context` tokens cached in blocks in reverse order, random rows (the speed
// does not depend on the values).
import type { Built } from './product-setup.js';

const [HEADS, KV_HEADS, HEAD_DIM, BLOCK] = [9, 3, 64, 16];

/** Multiply-adds of one step after `context` tokens: every query head's scores and weighted values. */
export const attentionMacs = (context: number): number => 2 * HEADS * (context + 1) * HEAD_DIM;

/** The call, and its multiply-adds. */
export function attentionCall(b: Built, context: number): { call: () => void; macs: number } {
  const blocks = Math.ceil((context + 1) / BLOCK);
  const row = HEAD_DIM + 4;
  const rows = blocks * KV_HEADS * BLOCK;
  let seed = 7;
  const random = () => {
    seed = (seed * 1103515245 + 12345) >>> 0;
    return seed / 2 ** 32;
  };
  const pool = () => {
    const at = b.memory.alloc(rows * row);
    const bytes = b.memory.u8(at, rows * row);
    const view = new DataView(bytes.buffer, bytes.byteOffset);
    for (let r = 0; r < rows; r++) {
      for (let d = 0; d < HEAD_DIM; d++) bytes[r * row + d] = Math.floor(random() * 255) - 127;
      view.setFloat32(r * row + HEAD_DIM, 0.01 + random() * 0.02, true);
    }
    return at;
  };
  const [kpool, vpool] = [pool(), pool()];
  const table = b.memory.alloc(blocks * 4);
  // Positions over the blocks in reverse, as a pool that gave them out of order would hold them.
  b.memory.i32(table, blocks).set(Array.from({ length: blocks }, (_, i) => blocks - 1 - i));
  const width = HEADS * HEAD_DIM;
  const q = b.memory.alloc(width * 4);
  b.memory.f32(q, width).set(Array.from({ length: width }, () => random() * 2 - 1));
  const out = b.memory.alloc(width * 4);
  const scores = b.memory.alloc(HEADS * (context + 5) * 4);
  const scale = 1 / Math.sqrt(HEAD_DIM);
  return {
    call: () =>
      b.kernels.attention(
        out,
        q,
        kpool,
        vpool,
        table,
        context,
        1,
        HEADS,
        KV_HEADS,
        HEAD_DIM,
        BLOCK,
        scale,
        scores,
        2,
        0,
      ),
    macs: attentionMacs(context),
  };
}
