// The edge kernels' module is checked against what KernelExports declares when it is instantiated: a build
// that lacks a function is refused at load, naming it, rather than failing at its first call mid-pass.
import { describe, expect, it } from 'vitest';
import { edgeKernelsModule, KERNELS_BUILDS } from '../src/backends/edge-kernels-node.js';
import { checkedExports, instantiateKernels, KERNELS_MIN_PAGES } from '../src/engine/runners/wasm/edge-kernels.js';

describe('the kernels module', () => {
  it('exports every function the runner calls, in every build', async () => {
    for (const build of KERNELS_BUILDS) {
      const { kernels } = await instantiateKernels(edgeKernelsModule(build));
      expect(typeof kernels.attention).toBe('function');
    }
  });

  it('refuses exports that lack one, naming what is missing', async () => {
    const instance = await WebAssembly.instantiate(edgeKernelsModule(), {
      env: { memory: new WebAssembly.Memory({ initial: KERNELS_MIN_PAGES }) },
    });
    const { attention: _attention, kv_write_f16: _write, ...rest } = instance.exports;
    expect(() => checkedExports(rest)).toThrow(/does not export kv_write_f16, attention:/);
    expect(() => checkedExports(instance.exports)).not.toThrow();
  });
});
