import type { OrtRuntime } from '../../src/engine/model/runtime.js';

/**
 * Backends a Node process can run: `auto` is webgpu when a WebGPU adapter exists, else the fastest runner for the
 * weights: onnxruntime-node for float, our kernels (wasm) for quantised ones. `wasm` runs
 * Llama graphs on our edge kernels and others on onnxruntime-web; `kernels` insists on the kernels,
 * `ort-wasm` on onnxruntime-web (the two the bench compares).
 */
export const NODE_BACKENDS = ['auto', 'cpu', 'wasm', 'kernels', 'ort-wasm', 'webgpu'] as const;
export type NodeBackend = (typeof NODE_BACKENDS)[number];

export function isNodeBackend(value: unknown): value is NodeBackend {
  return typeof value === 'string' && (NODE_BACKENDS as readonly string[]).includes(value);
}

/**
 * Float weights run fastest on onnxruntime-node's native CPU backend (two threads, prepacked); quantised ones
 * on our kernels, which multiply the 8- and 4-bit blocks where onnxruntime dequantises them (docs/benchmarks.md).
 */
const FLOAT_DTYPES = new Set(['fp32', 'fp16']);

/**
 * The runtime for a Node process: onnxruntime-node (`cpu`), onnxruntime-web's WASM (`wasm`), its
 * WebGPU EP on Dawn (`webgpu`; throws without an adapter), or `auto`. The modules are imported only
 * when chosen: ORT's WebGPU build is large and Dawn starts a Vulkan instance.
 */
export async function nodeRuntime(backend: NodeBackend, dtype?: string): Promise<OrtRuntime> {
  if (backend === 'cpu') return (await import('../../src/backends/ort-node.js')).nodeCpuRuntime();
  if (backend === 'wasm') return (await import('../../src/backends/ort-web-node.js')).webWasmRuntimeForNode();
  if (backend === 'kernels')
    return (await import('../../src/backends/ort-web-node.js')).webWasmRuntimeForNode(1, 'kernels');
  if (backend === 'ort-wasm')
    return (await import('../../src/backends/ort-web-node.js')).webWasmRuntimeForNode(1, 'onnxruntime');
  if (backend === 'webgpu') return (await import('../../src/backends/ort-webgpu-node.js')).webGpuRuntimeForNode();
  if (backend === 'auto') {
    const { nodeGpuAdapter } = await import('../../src/backends/ort-webgpu-node.js');
    if (await nodeGpuAdapter()) return nodeRuntime('webgpu');
    return nodeRuntime(FLOAT_DTYPES.has(dtype ?? 'fp32') ? 'cpu' : 'wasm');
  }
  throw new Error(`unknown backend ${String(backend)}; use ${NODE_BACKENDS.join(', ')}`);
}
