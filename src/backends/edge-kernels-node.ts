import { readFileSync } from 'node:fs';

let compiled: WebAssembly.Module | undefined;

/** Our WebAssembly kernels for Node: the committed binary, compiled once per process. */
export function edgeKernelsModule(): WebAssembly.Module {
  compiled ??= new WebAssembly.Module(readFileSync(new URL('../engine/kernels/edge-kernels.wasm', import.meta.url)));
  return compiled;
}
