import { createRequire } from 'node:module';
import { dirname } from 'node:path';
import { pathToFileURL } from 'node:url';
import * as ort from 'onnxruntime-web';
import type { OrtRuntime } from '../engine/model/runtime.js';

/**
 * onnxruntime-web's WASM backend inside Node (the same kernels that run in workerd). Its loader finds
 * the .wasm beside itself through import.meta.url, which bundlers and module runners (vitest's) rewrite,
 * so the package's dist folder is named explicitly.
 */
export function webWasmRuntimeForNode(numThreads = 1): OrtRuntime {
  const dist = dirname(createRequire(import.meta.url).resolve('onnxruntime-web'));
  ort.env.wasm.wasmPaths = `${pathToFileURL(dist).href}/`;
  ort.env.wasm.numThreads = numThreads;
  ort.env.wasm.proxy = false;
  return { name: 'wasm', InferenceSession: ort.InferenceSession, Tensor: ort.Tensor, executionProviders: ['wasm'] };
}
