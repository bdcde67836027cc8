// Which relaxed build a workerd isolate runs is read from how its V8 lowers the int32 dot product
// (src/engine/runners/wasm/dot-lowering.ts): the probe's sums name the lowering, and in Node 20 (whose V8 has no
// fused lowering) the dot-add build's probe reads as not fused, so the choice would be the relaxed-wide build.
import { describe, expect, it } from 'vitest';
import { edgeKernelsModule, preferredBuild } from '../src/backends/edge-kernels-node.js';
import { dotLoweringOf, probeDotLowering } from '../src/engine/runners/wasm/dot-lowering.js';

describe('the dot product lowering probe', () => {
  it('names each lowering by its sum', () => {
    expect(dotLoweringOf(518_160)).toBe('fused-unsigned');
    expect(dotLoweringOf(262_136)).toBe('saturating');
    expect(dotLoweringOf(-2_032)).toBe('other');
    expect(dotLoweringOf(0)).toBe('other');
  });

  it("reads Node 20's V8 as not fused (x64: pmaddubsw's saturating pairs)", () => {
    const lowering = probeDotLowering(edgeKernelsModule('dot-add'));
    expect(lowering).not.toBe('fused-unsigned');
    if (process.arch === 'x64') expect(lowering).toBe('saturating');
  });

  it('refuses EDGE_KERNELS_BUILD=dot-add in a Node whose V8 does not fuse, naming the lowering', () => {
    const before = process.env.EDGE_KERNELS_BUILD;
    try {
      process.env.EDGE_KERNELS_BUILD = 'dot-add';
      expect(() => preferredBuild()).toThrow(/dot-add.*'(saturating|other)'.*not exact/);
      process.env.EDGE_KERNELS_BUILD = 'relaxed-wide';
      expect(preferredBuild()).toBe('relaxed-wide');
    } finally {
      if (before === undefined) delete process.env.EDGE_KERNELS_BUILD;
      else process.env.EDGE_KERNELS_BUILD = before;
    }
  });
});
