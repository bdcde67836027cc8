import * as ort from 'onnxruntime-web/wasm';
import { absentOrt } from './onnxruntime-absent.js';
// wrangler (and vitest-pool-workers) import a .wasm file as a compiled WebAssembly.Module: workerd
// forbids compiling WebAssembly from bytes at run time, so the module must arrive precompiled.
import ortWasmModule from 'onnxruntime-web/ort-wasm-simd-threaded.wasm';
// workerd's V8 runs relaxed SIMD, exactly from the first call (docs/platform.md): the relaxed build this host
// runs faster, and for 8-bit graphs the build that runs their products faster here (relaxed-kernels-workerd.ts;
// EngineRuntime.kernels8Bit; every build gives the same bits where it runs).
import xgrammarWasm from '../engine/constraints/xgrammar/xgrammar.wasm';
import type { EngineRuntime, RunnerChoice } from '../engine/model/runtime.js';
import { eightBitKernelsForThisHost, relaxedKernelsForThisHost } from './relaxed-kernels-workerd.js';

/**
 * onnxruntime-web's WASM backend inside workerd (see docs/platform.md). ORT 1.30 cannot be handed a compiled
 * module, so it is given placeholder bytes as `wasmBinary` and `WebAssembly.instantiate` is wrapped: when
 * ORT tries to instantiate those bytes, the precompiled module is instantiated with ORT's imports instead.
 * The loader (`onnxruntime-web/wasm`, loader built in) and the binary must come from the same package.
 */
const PLACEHOLDER = new TextEncoder().encode('edge-infer: precompiled ort-wasm-simd-threaded module');

function isPlaceholder(source: unknown): boolean {
  let bytes: Uint8Array | undefined;
  if (source instanceof Uint8Array) bytes = source;
  else if (source instanceof ArrayBuffer) bytes = new Uint8Array(source);
  if (!bytes || bytes.length !== PLACEHOLDER.length) return false;
  return bytes.every((b, i) => b === PLACEHOLDER[i]);
}

let hooked = false;
function hookInstantiate(): void {
  if (hooked) return;
  hooked = true;
  const original = WebAssembly.instantiate.bind(WebAssembly) as (
    s: unknown,
    i?: WebAssembly.Imports,
  ) => Promise<unknown>;
  const patched = async (source: unknown, imports?: WebAssembly.Imports): Promise<unknown> => {
    if (!isPlaceholder(source)) return original(source, imports);
    const instance = (await original(ortWasmModule, imports)) as WebAssembly.Instance;
    return { instance, module: ortWasmModule };
  };
  (WebAssembly as { instantiate: unknown }).instantiate = patched;
}

/**
 * The wasm backend in workerd: our edge kernels (precompiled by wrangler like ORT's binary) for the
 * Llama graphs they cover, onnxruntime-web for the rest. A build that aliases onnxruntime-web away
 * (src/backends/onnxruntime-absent.ts, `npm run deploy:kernels-only`) has the kernels alone.
 */
export function workerdWasmRuntime(runner: RunnerChoice = 'auto'): EngineRuntime {
  const kernels = runner === 'onnxruntime' ? undefined : relaxedKernelsForThisHost();
  const kernels8Bit = kernels && eightBitKernelsForThisHost();
  if (ortWasmModule === undefined) return { ...absentOrt(), kernels, kernels8Bit, runner, grammar: xgrammarWasm };
  hookInstantiate();
  ort.env.wasm.wasmBinary = PLACEHOLDER;
  ort.env.wasm.numThreads = 1; // no worker threads in workerd
  ort.env.wasm.proxy = false;
  return {
    name: 'wasm',
    InferenceSession: ort.InferenceSession,
    Tensor: ort.Tensor,
    executionProviders: ['wasm'],
    kernels,
    kernels8Bit,
    runner,
    grammar: xgrammarWasm,
  };
}
