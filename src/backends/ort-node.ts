import * as ort from 'onnxruntime-node';
import type { OrtRuntime } from '../engine/model/runtime.js';
import { xgrammarModule } from './xgrammar-node.js';

/** onnxruntime-node's native CPU backend: what the CLI and benchmarks use in Node. */
export function nodeCpuRuntime(): OrtRuntime {
  return {
    name: 'cpu',
    InferenceSession: ort.InferenceSession,
    Tensor: ort.Tensor,
    executionProviders: ['cpu'],
    grammar: xgrammarModule(),
  };
}
