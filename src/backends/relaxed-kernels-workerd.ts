// Both relaxed builds of the kernels, precompiled by wrangler, and the one this isolate's V8 runs faster: the
// dot-add build where it fuses the int32 dot product into one instruction (AVX-VNNI), else the int16-pair build
// (dot-lowering.ts). They give the same bits, so the choice is speed only. Read once per isolate.
import dotAdd from '../engine/runners/wasm/edge-kernels-dot-add.wasm';
import relaxed from '../engine/runners/wasm/edge-kernels-relaxed.wasm';
import { probeDotLowering } from '../engine/runners/wasm/dot-lowering.js';

let chosen: WebAssembly.Module | undefined;

export function relaxedKernelsForThisHost(): WebAssembly.Module {
  chosen ??= probeDotLowering(dotAdd) === 'fused-unsigned' ? dotAdd : relaxed;
  return chosen;
}
