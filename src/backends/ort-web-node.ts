import { createRequire } from 'node:module';
import { dirname } from 'node:path';
import { pathToFileURL } from 'node:url';
import * as ort from 'onnxruntime-web';
import type { EngineRuntime, RunnerChoice } from '../engine/model/runtime.js';
import { edgeKernelsModule, preferredBuild } from './edge-kernels-node.js';
import { xgrammarModule } from './xgrammar-node.js';

/**
 * The `wasm` backend inside Node, as in workerd: our edge kernels for the Llama graphs they cover
 * (`runner`: see RunnerChoice), onnxruntime-web's WASM build for the rest. ORT's loader finds its .wasm
 * beside itself through import.meta.url, which bundlers and module runners (vitest's) rewrite, so the
 * package's dist folder is named explicitly.
 */
export function webWasmRuntimeForNode(numThreads = 1, runner: RunnerChoice = 'auto'): EngineRuntime {
  const dist = dirname(createRequire(import.meta.url).resolve('onnxruntime-web'));
  ort.env.wasm.wasmPaths = `${pathToFileURL(dist).href}/`;
  ort.env.wasm.numThreads = numThreads;
  ort.env.wasm.proxy = false;
  const kernels = runner === 'onnxruntime' ? undefined : edgeKernelsModule();
  // 8-bit graphs run faster on the baseline build (EngineRuntime.kernels8Bit), unless a build was asked for.
  const kernels8Bit =
    kernels && !process.env.EDGE_KERNELS_BUILD && preferredBuild() === 'relaxed'
      ? edgeKernelsModule('baseline')
      : undefined;
  return {
    name: 'wasm',
    InferenceSession: ort.InferenceSession,
    Tensor: ort.Tensor,
    executionProviders: ['wasm'],
    kernels,
    kernels8Bit,
    runner,
    grammar: xgrammarModule(),
  };
}
