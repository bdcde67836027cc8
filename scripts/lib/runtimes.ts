import type { OrtRuntime } from '../../src/engine/model/runtime.js';

export type NodeBackend = 'cpu' | 'wasm';

/** The runtime for a Node process: onnxruntime-node (`cpu`) or onnxruntime-web's WASM (`wasm`). */
export async function nodeRuntime(backend: NodeBackend): Promise<OrtRuntime> {
  if (backend === 'cpu') return (await import('../../src/backends/ort-node.js')).nodeCpuRuntime();
  if (backend === 'wasm') return (await import('../../src/backends/ort-web-node.js')).webWasmRuntimeForNode();
  throw new Error(`unknown backend ${String(backend)}; use cpu or wasm`);
}
