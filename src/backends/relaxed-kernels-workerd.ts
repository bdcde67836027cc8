// Both relaxed builds the worker carries, precompiled by wrangler, and the one this isolate's V8 runs faster: the
// dot-add build where it fuses the int32 dot product into one instruction (AVX-VNNI), else the int16-pair build
// (dot-lowering.ts). Both have the wide single-row tile (workerd bounds-checks every load: docs/platform.md); Node's
// relaxed build does not. They give the same bits, so the choice is speed only. Read once per isolate.
import dotAdd from '../engine/runners/wasm/edge-kernels-dot-add.wasm';
import relaxedWide from '../engine/runners/wasm/edge-kernels-relaxed-wide.wasm';
import { probeDotLowering } from '../engine/runners/wasm/dot-lowering.js';

let chosen: WebAssembly.Module | undefined;

export function relaxedKernelsForThisHost(): WebAssembly.Module {
  chosen ??= probeDotLowering(dotAdd) === 'fused-unsigned' ? dotAdd : relaxedWide;
  return chosen;
}
