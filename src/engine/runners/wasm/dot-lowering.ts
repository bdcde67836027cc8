import { KERNELS_MIN_PAGES } from './edge-kernels.js';

/**
 * How this V8, on this CPU, lowers relaxed SIMD's int32 dot product (`i32x4.relaxed_dot_i8x16_i7x16_add_s`), read
 * from what it computes where the result is implementation-defined: a second operand with its top bit set.
 * Sixteen 127s against sixteen 255s give
 *   - 16 · 127 · 255 = 518,160 from one fused instruction reading that operand as unsigned (x64 `vpdpbusd`, AVX-VNNI);
 *   - 8 · 32,767 = 262,136 from `pmaddubsw`, whose int16 pair sums saturate, then `pmaddwd` and `paddd` (x64
 *     without AVX-VNNI: Node 20's V8 always);
 *   - 16 · 127 · −1 = −2,032 from a signed reading (AVX-VNNI-INT8, Arm's `sdot`, a scalar fallback).
 * Only the first makes the dot-add build faster than the relaxed one (docs/kernels.md: in workerd on this host
 * 1.08-1.15×, and with AVX-VNNI turned off 0.69-0.78×), and only under the first is that build exact: its 8-bit
 * products pass u = q + 128 (0..255) as that operand, one instruction per 16 multiply-adds instead of two
 * (`eightBitExact`). Its 4-bit products and attention, and every other build, never pass such operands.
 */
export type DotLowering = 'fused-unsigned' | 'saturating' | 'other';

export function dotLoweringOf(sum: number): DotLowering {
  if (sum === 16 * 127 * 255) return 'fused-unsigned';
  if (sum === 8 * 32767) return 'saturating';
  return 'other';
}

/**
 * Whether `build` computes 8-bit products exactly where V8 lowers the int32 dot product as `lowering`: the dot-add
 * build only under the fused unsigned reading (so a host runs it nowhere else), every other build everywhere.
 */
export const eightBitExact = (build: string, lowering: DotLowering): boolean =>
  build !== 'dot-add' || lowering === 'fused-unsigned';

/** Runs `module`'s `probe_dot` (a dot-add build's: the int32 form) on the operands above. */
export function probeDotLowering(module: WebAssembly.Module): DotLowering {
  const memory = new WebAssembly.Memory({ initial: KERNELS_MIN_PAGES });
  const instance = new WebAssembly.Instance(module, { env: { memory } });
  const probe = instance.exports.probe_dot as (a: number, u: number) => number;
  new Int8Array(memory.buffer, 1024, 16).fill(127);
  new Uint8Array(memory.buffer, 2048, 16).fill(255);
  return dotLoweringOf(probe(1024, 2048));
}
