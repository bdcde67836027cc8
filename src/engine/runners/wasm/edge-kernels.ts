import { LinearMemory } from './linear-memory.js';

/**
 * The edge kernels (kernels/*.c, built into edge-kernels.wasm) instantiated over a memory the host
 * sizes: weights, KV pool and scratch all live in that one WebAssembly.Memory, and every pointer below
 * is a byte offset into it. Shapes are in the C sources' comments.
 */
/**
 * Stores `count` new tokens' keys and values (count, kv_heads * head_dim float32) at positions start .. of
 * the sequence whose block table is at `table`, in the pool's element type.
 */
type KvWrite = (
  kpool: number,
  vpool: number,
  table: number,
  start: number,
  count: number,
  k: number,
  v: number,
  kvHeads: number,
  headDim: number,
  blockSize: number,
) => void;

export interface KernelExports {
  rmsnorm(out: number, x: number, w: number, rows: number, n: number, eps: number): void;
  rope(x: number, cos: number, sin: number, rows: number, heads: number, headDim: number, rowStride: number): void;
  silu_mul(gate: number, up: number, n: number): void;
  /** Gemma's GeGLU: gate = gelu_tanh(gate) * up. */
  gelu_tanh_mul(gate: number, up: number, n: number): void;
  scale_inplace(x: number, s: number, n: number): void;
  add_inplace(x: number, y: number, n: number): void;
  embed_f16(out: number, table: number, id: number, n: number): void;
  embed_bf16(out: number, table: number, id: number, n: number): void;
  /** xq (rows, blocks * 32) int8 or int16 (by build), xs (rows, blocks), xsum (rows, blocks, 2). */
  quantize_rows(xq: number, xs: number, xsum: number, x: number, rows: number, k: number, blocks: number): void;
  matmul_kn_f32(y: number, x: number, w: number, m: number, k: number, n: number): void;
  matmul_kn_f16(y: number, x: number, w: number, m: number, k: number, n: number): void;
  matmul_nk_f32(y: number, x: number, w: number, m: number, k: number, n: number): void;
  matmul_nk_f16(y: number, x: number, w: number, m: number, k: number, n: number): void;
  matmul_nk_bf16(y: number, x: number, w: number, m: number, k: number, n: number): void;
  /** y (m, n) over a quantised matrix whose qmat header is at `header` (kernels/quant.h). */
  matmul_q(y: number, xq: number, xs: number, xsum: number, header: number, m: number, blocks: number, n: number): void;
  dequantize_column(out: number, header: number, col: number, blocks: number): void;
  repack_ort_q4(q: number, blocks: number): void;
  /** A V4 plane's groups of 4 columns interleaved in place, as the products read it (kernels/quant.h). */
  interleave_v4(q: number, n: number, blocks: number, tmp: number): void;
  flip_sign(q: number, n: number): void;
  repack_ggml(type: number, src: number, col0: number, cols: number, blocks: number, header: number): void;
  kv_write: KvWrite;
  /** kv_write into a float16 pool. */
  kv_write_f16: KvWrite;
  /** kv_write into an 8-bit pool: each (token, head) row head_dim int8 then its float32 scale. */
  kv_write_i8: KvWrite;
  attention(
    out: number,
    q: number,
    kpool: number,
    vpool: number,
    table: number,
    start: number,
    count: number,
    heads: number,
    kvHeads: number,
    headDim: number,
    blockSize: number,
    scale: number,
    scores: number,
    /** The pool's elements: KV_TYPE's codes. */
    kvType: number,
    /** A sliding-window layer's window (a token sees the last `window` positions, itself included); 0: all. */
    window: number,
  ): void;
}

/** Every function KernelExports declares: a build that lacks one is refused at load, naming it, not at its first call. */
const DECLARED: Record<keyof KernelExports, true> = {
  rmsnorm: true,
  rope: true,
  silu_mul: true,
  gelu_tanh_mul: true,
  scale_inplace: true,
  add_inplace: true,
  embed_f16: true,
  embed_bf16: true,
  quantize_rows: true,
  matmul_kn_f32: true,
  matmul_kn_f16: true,
  matmul_nk_f32: true,
  matmul_nk_f16: true,
  matmul_nk_bf16: true,
  matmul_q: true,
  dequantize_column: true,
  repack_ort_q4: true,
  interleave_v4: true,
  flip_sign: true,
  repack_ggml: true,
  kv_write: true,
  kv_write_f16: true,
  kv_write_i8: true,
  attention: true,
};

/** The instance's exports as KernelExports, once each declared function is checked to be there. */
export function checkedExports(exports: WebAssembly.Exports): KernelExports & { __heap_base: WebAssembly.Global } {
  const missing = Object.keys(DECLARED).filter((name) => typeof exports[name] !== 'function');
  if (!(exports.__heap_base instanceof WebAssembly.Global)) missing.push('__heap_base');
  if (missing.length)
    throw new Error(
      `the edge kernels' module does not export ${missing.join(', ')}: rebuild it (npm run kernels:build)`,
    );
  return exports as unknown as KernelExports & { __heap_base: WebAssembly.Global };
}

const PAGE = 65536;
/** Pages the module asks for at least: its data and its 128 KiB stack (kernels/build.sh), with room to spare. */
export const KERNELS_MIN_PAGES = 4;

/** Instantiates the kernels with a fresh memory of `initialBytes` (it grows as weights are placed). */
export async function instantiateKernels(
  module: WebAssembly.Module,
  initialBytes = KERNELS_MIN_PAGES * PAGE,
): Promise<{ kernels: KernelExports; memory: LinearMemory }> {
  const memory = new WebAssembly.Memory({ initial: Math.ceil(initialBytes / PAGE), maximum: 65536 });
  const instance = await WebAssembly.instantiate(module, { env: { memory } });
  const exports = checkedExports(instance.exports);
  return { kernels: exports, memory: new LinearMemory(memory, exports.__heap_base.value as number) };
}
