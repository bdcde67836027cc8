// Every build of our kernels inside workerd's V8: the relaxed builds (the worker runs whichever of its two this host
// runs faster) and the baseline give the same bits for the block-quantised product in every form and for attention
// over an 8-bit pool (a decode step's and a block's), and the same bits as in Node. The dot-add build's 8-bit
// products past one row are exact only where V8 fuses its dot product (vpdpbusd), so they are held to the others'
// bits where it does (the hosts that run that build: on one without AVX-VNNI nothing here runs them). This is the
// check docs/platform.md's "relaxed SIMD is exact here" rests on, in the engine the product runs in.
import { describe, expect, inject, it } from 'vitest';
import dotAdd from '../../src/engine/runners/wasm/edge-kernels-dot-add.wasm';
import baseline from '../../src/engine/runners/wasm/edge-kernels.wasm';
import relaxed from '../../src/engine/runners/wasm/edge-kernels-relaxed.wasm';
import relaxedWide from '../../src/engine/runners/wasm/edge-kernels-relaxed-wide.wasm';
import { eightBitKernelsForThisHost, relaxedKernelsForThisHost } from '../../src/backends/relaxed-kernels-workerd.js';
import { workerdWasmRuntime } from '../../src/backends/ort-web-workerd.js';
import { probeDotLowering } from '../../src/engine/runners/wasm/dot-lowering.js';
import { instantiateKernels } from '../../src/engine/runners/wasm/edge-kernels.js';
import { exactUnder, kernelProbe, probeRows } from '../helpers/kernel-probe.js';
import { quantProbe } from '../helpers/quant-layout.js';

describe('kernel builds in workerd', () => {
  it('give the same bits in every quantised form and in 8-bit attention, as each other and as Node', async () => {
    const inWorkerd: Record<string, Record<string, number[]>> = {};
    for (const [build, module] of [
      ['baseline', baseline],
      ['relaxed', relaxed],
      ['relaxed-wide', relaxedWide],
      ['dot-add', dotAdd],
    ] as const) {
      const { kernels, memory } = await instantiateKernels(module);
      inWorkerd[build] = kernelProbe(kernels, memory);
    }
    const inNode = inject('nodeKernelProbe');
    // The dot-add build's 8-bit products are exact only where V8 fuses its dot product (the hosts that run it).
    const here = probeDotLowering(dotAdd);
    const inNodeLowering = inject('nodeDotLowering');
    // 8 quantised forms (7 rows, one row), the 3 zero-point forms with one zero point, 2 attention runs
    expect(Object.keys(inWorkerd.baseline)).toHaveLength(21);
    for (const format of Object.keys(inWorkerd.baseline))
      for (const build of ['relaxed', 'relaxed-wide', 'dot-add']) {
        if (exactUnder(build, format, here, probeRows(format)))
          expect(inWorkerd[build][format], `${build} ${format}`).toEqual(inWorkerd.baseline[format]);
        if (exactUnder(build, format, inNodeLowering, probeRows(format)))
          expect(inNode[build][format], `${build} ${format} in Node`).toEqual(inNode.baseline[format]);
      }
    for (const format of Object.keys(inWorkerd.baseline))
      expect(inWorkerd.baseline[format], format).toEqual(inNode.baseline[format]);
  });

  it("keeps the chosen build's bits as V8 optimises it (Liftoff first, TurboFan once the products run hot)", async () => {
    const { kernels, memory } = await instantiateKernels(relaxedKernelsForThisHost());
    const first = quantProbe({ k: kernels, mem: memory });
    const base = await instantiateKernels(baseline);
    expect(first).toEqual(quantProbe({ k: base.kernels, mem: base.memory }));
    for (let call = 0; call < 200; call++) expect(quantProbe({ k: kernels, mem: memory })).toEqual(first);
  });

  it('runs the dot-add build exactly where its V8 fuses the int32 dot product, else the wide relaxed one', () => {
    const lowering = probeDotLowering(dotAdd);
    expect(relaxedKernelsForThisHost()).toBe(lowering === 'fused-unsigned' ? dotAdd : relaxedWide);
  });

  it('runs 8-bit graphs on the dot-add build where it fuses, else on the baseline build', () => {
    const lowering = probeDotLowering(dotAdd);
    expect(eightBitKernelsForThisHost()).toBe(lowering === 'fused-unsigned' ? dotAdd : baseline);
    const runtime = workerdWasmRuntime();
    expect(runtime.kernels8Bit).toBe(eightBitKernelsForThisHost());
  });
});
