import * as ort from 'onnxruntime-node';
import type { EngineRuntime } from '../engine/model/runtime.js';
import { xgrammarModule } from './xgrammar-node.js';

/** onnxruntime-node's native CPU backend: what the CLI and benchmarks use in Node. */
export function nodeCpuRuntime(): EngineRuntime {
  return {
    name: 'cpu',
    InferenceSession: ort.InferenceSession,
    Tensor: ort.Tensor,
    executionProviders: ['cpu'],
    grammar: xgrammarModule(),
  };
}
