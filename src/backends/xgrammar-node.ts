import { readFileSync } from 'node:fs';

let compiled: WebAssembly.Module | undefined;

/** xgrammar's WebAssembly for Node (structured outputs): the vendored binary, compiled once per process. */
export function xgrammarModule(): WebAssembly.Module {
  compiled ??= new WebAssembly.Module(
    readFileSync(new URL('../engine/constraints/xgrammar/xgrammar.wasm', import.meta.url)),
  );
  return compiled;
}
