// Both relaxed builds the worker carries, precompiled by wrangler, and the one this isolate's V8 runs faster: the
// dot-add build where it fuses the int32 dot product into one instruction (AVX-VNNI), else the int16-pair build
// (dot-lowering.ts). Both have the wide single-row tile (workerd bounds-checks every load: docs/platform.md); Node's
// relaxed build does not. Where it runs, each gives the same bits; the dot-add build's 8-bit products are exact only
// under the fused lowering (dot-lowering.ts, `eightBitExact`), which is why it runs nowhere else. Read once per isolate.
import dotAdd from '../engine/runners/wasm/edge-kernels-dot-add.wasm';
import relaxedWide from '../engine/runners/wasm/edge-kernels-relaxed-wide.wasm';
import baseline from '../engine/runners/wasm/edge-kernels.wasm';
import { probeDotLowering } from '../engine/runners/wasm/dot-lowering.js';

let chosen: WebAssembly.Module | undefined;

export function relaxedKernelsForThisHost(): WebAssembly.Module {
  chosen ??= probeDotLowering(dotAdd) === 'fused-unsigned' ? dotAdd : relaxedWide;
  return chosen;
}

/**
 * The build graphs whose every product is 8-bit run on (EngineRuntime.kernels8Bit): the dot-add build where it
 * fuses, whose 8-bit products take one fused dot product per 16 multiply-adds past one row (u = q + 128 read as
 * unsigned) and two at one row; else the baseline build, whose 16-bit products beat the int16 pairs past one row
 * (docs/kernels.md). The same bits either way.
 */
export function eightBitKernelsForThisHost(): WebAssembly.Module {
  return relaxedKernelsForThisHost() === dotAdd ? dotAdd : baseline;
}
