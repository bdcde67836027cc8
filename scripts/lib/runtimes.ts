import type { EngineRuntime } from '../../src/engine/model/runtime.js';
import { probeGpuAdapter, type AdapterKind } from './gpu-probe.js';

/**
 * Backends a Node process can run: `auto` is the runner that serves the weights fastest here: our kernels (wasm)
 * for quantised and GGUF weights, which they multiply where onnxruntime dequantises them and which WebGPU
 * cannot run (GGUF); for float weights webgpu on a hardware GPU, else onnxruntime-node (a software adapter
 * such as lavapipe decodes at ~1 tok/s against 28: docs/platform.md). `wasm` runs
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
export async function nodeRuntime(backend: NodeBackend, dtype?: string): Promise<EngineRuntime> {
  if (backend === 'cpu') return (await import('../../src/backends/ort-node.js')).nodeCpuRuntime();
  if (backend === 'wasm') return (await import('../../src/backends/ort-web-node.js')).webWasmRuntimeForNode();
  if (backend === 'kernels')
    return (await import('../../src/backends/ort-web-node.js')).webWasmRuntimeForNode(1, 'kernels');
  if (backend === 'ort-wasm')
    return (await import('../../src/backends/ort-web-node.js')).webWasmRuntimeForNode(1, 'onnxruntime');
  if (backend === 'webgpu') return (await import('../../src/backends/ort-webgpu-node.js')).webGpuRuntimeForNode();
  if (backend === 'auto') return nodeRuntime(autoBackend(dtype));
  throw new Error(`unknown backend ${String(backend)}; use ${NODE_BACKENDS.join(', ')}`);
}

/**
 * What `auto` resolves to for weights of `dtype`: never a runner that would refuse them. Dawn is asked (in a
 * child, gpu-probe.ts) only for float weights, so a quantised run never starts Vulkan or prints its warnings.
 */
export function autoBackend(
  dtype: string | undefined,
  adapter: () => AdapterKind = () => probeGpuAdapter().kind,
): Exclude<NodeBackend, 'auto'> {
  if (!FLOAT_DTYPES.has(dtype ?? 'fp32')) return 'wasm';
  return adapter() === 'hardware' ? 'webgpu' : 'cpu';
}
