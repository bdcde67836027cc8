// Regenerates src/engine/constraints/xgrammar/{xgrammar-glue.js,xgrammar.wasm} from @mlc-ai/web-xgrammar.
//
// Why a vendored copy: the npm package is one UMD file (in a `"type": "module"` package, so Node's ESM loader
// cannot run it) that carries its wasm as a base64 data URI and compiles it with `WebAssembly.instantiate`
// at run time. workerd forbids compiling wasm from bytes, and the base64 would add ~390 KiB gzip to the
// deploy bundle on top of the binary. So: the wasm goes to a file of its own (wrangler imports it as a
// compiled module; Node compiles it from disk), and the glue becomes an ES module that takes the compiled
// module through emscripten's `instantiateWasm` hook. test/xgrammar-vendor.test.ts fails when the
// committed files no longer match the installed package: run `npx tsx scripts/xgrammar-vendor.ts` then.
import { readFileSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';

const OUT = fileURLToPath(new URL('../src/engine/constraints/xgrammar/', import.meta.url));

/** Replaces `from` (which must occur exactly `count` times) everywhere in `text`. */
function replaceExact(text: string, from: string | RegExp, to: string, count = 1): string {
  const re =
    typeof from === 'string'
      ? new RegExp(from.replace(/[.*+?^${}()|[\]\\]/g, '\\$&'), 'g')
      : new RegExp(from.source, 'g');
  const found = text.match(re)?.length ?? 0;
  if (found !== count)
    throw new Error(`xgrammar-vendor: expected ${count} of ${String(from).slice(0, 80)}, found ${found}`);
  return text.replace(re, () => to);
}

/** An unsigned LEB128 at `at`: its value and where it ends. */
function readLeb(bytes: Uint8Array, at: number): { value: number; end: number } {
  let value = 0;
  let scale = 1;
  for (let i = at; ; i++) {
    value += (bytes[i] & 0x7f) * scale;
    scale *= 128;
    if ((bytes[i] & 0x80) === 0) return { value, end: i + 1 };
  }
}

/**
 * Emscripten builds xgrammar with 16 MiB of initial memory (259 pages) and lets it grow. Each instance
 * (runtime.ts keeps two: one holds the tokenizer and grammars, one only parses) then takes 16 MiB of an
 * isolate's 128 MB at once, though its data and stack end below 136 KiB. Starting at the pages that hold
 * them, each grows to what it uses. The minimum is rewritten in the bytes it took (a padded LEB128, which
 * decoders accept), so nothing else in the module moves.
 */
export function shrinkInitialMemory(wasm: Uint8Array): Uint8Array {
  const out = new Uint8Array(wasm);
  let stackTop = 0;
  let memoryMin: { at: number; end: number } | undefined;
  for (let at = 8; at < out.length; ) {
    const id = out[at];
    const size = readLeb(out, at + 1);
    const body = size.end;
    if (id === 5) {
      const count = readLeb(out, body);
      if (count.value !== 1 || (out[count.end] & ~1) !== 0)
        throw new Error('xgrammar-vendor: unexpected memory section');
      const min = readLeb(out, count.end + 1);
      memoryMin = { at: count.end + 1, end: min.end };
    } else if (id === 6) {
      // Global 0 is emscripten's stack pointer: an i32 (0x7f), mutable, set by i32.const (0x41) to the stack's top.
      const first = readLeb(out, body).end;
      if (out[first] !== 0x7f || out[first + 1] !== 1 || out[first + 2] !== 0x41)
        throw new Error('xgrammar-vendor: global 0 is not the stack pointer');
      stackTop = readLeb(out, first + 3).value;
    }
    at = body + size.value;
  }
  if (!memoryMin || stackTop === 0) throw new Error('xgrammar-vendor: no memory section or stack pointer');
  const pages = Math.ceil(stackTop / 65_536) + 1;
  const width = memoryMin.end - memoryMin.at;
  for (let i = 0; i < width; i++) out[memoryMin.at + i] = ((pages >> (7 * i)) & 0x7f) | (i < width - 1 ? 0x80 : 0);
  return out;
}

export interface VendoredXgrammar {
  glue: string;
  wasm: Uint8Array;
  version: string;
}

export function vendorXgrammar(): VendoredXgrammar {
  const require = createRequire(import.meta.url);
  const pkgPath = require.resolve('@mlc-ai/web-xgrammar/package.json');
  const version = (JSON.parse(readFileSync(pkgPath, 'utf8')) as { version: string }).version;
  let src = readFileSync(new URL('lib/index.js', `file://${pkgPath}`), 'utf8');

  const dataUri = /"data:application\/octet-stream;base64,([A-Za-z0-9+/=]+)"/;
  const base64 = dataUri.exec(src)?.[1];
  if (!base64) throw new Error('xgrammar-vendor: no embedded wasm found');
  const wasm = shrinkInitialMemory(new Uint8Array(Buffer.from(base64, 'base64')));
  src = replaceExact(src, dataUri, '""');

  // UMD wrapper → an ES module.
  const header = src.slice(0, src.indexOf("(function (exports) { 'use strict';"));
  if (!header.startsWith('(function (global, factory) {')) throw new Error('xgrammar-vendor: unexpected UMD header');
  src = src
    .slice(header.length)
    .replace("(function (exports) { 'use strict';", "const xgrammar = {};\n(function (exports) { 'use strict';");
  src = replaceExact(
    src,
    /\}\)\);\s*\/\/# sourceMappingURL=index\.js\.map\s*$/,
    '})(xgrammar);\nexport default xgrammar;\n',
  );

  // rollup's stand-in for import.meta.url (it calls `require`, which neither an ES module nor workerd has):
  // only used to locate the wasm file, which instantiateWasm makes unnecessary.
  src = replaceExact(
    src,
    "(typeof document === 'undefined' && typeof location === 'undefined' ? require('u' + 'rl').pathToFileURL(__filename).href : typeof document === 'undefined' ? location.href : (_documentCurrentScript && _documentCurrentScript.tagName.toUpperCase() === 'SCRIPT' && _documentCurrentScript.src || new URL('index.js', document.baseURI).href))",
    '"file:///xgrammar.js"',
    3,
  );
  // workerd with nodejs_compat looks like Node (process.versions.node) but has no `fs` to read the binary from.
  src = replaceExact(
    src,
    'var ENVIRONMENT_IS_NODE=typeof process=="object"&&typeof process.versions=="object"&&typeof process.versions.node=="string";',
    'var ENVIRONMENT_IS_NODE=false;',
  );
  // The compiled module is handed in: emscripten's instantiateWasm hook instead of compiling bytes.
  src = replaceExact(
    src,
    'binding = await Module();',
    'if (!bindingPromise) { const arg = moduleArg(); bindingPromise = Promise.race([Module(arg), arg.failed]); }\n          binding = await bindingPromise;',
  );
  src = replaceExact(
    src,
    '  let binding = null;\n',
    '  let binding = null;\n' +
      '  let bindingPromise = null; // one instance even when the first calls overlap\n' +
      '  let moduleArg = () => { throw new Error("xgrammar: setWasmModule() was not called"); };\n' +
      '  /** Gives the glue its compiled wasm module (a promise is fine); must precede the first use. */\n' +
      '  exports.setWasmModule = (module) => {\n' +
      '    moduleArg = () => {\n' +
      '      let fail;\n' +
      '      const failed = new Promise((_, reject) => { fail = reject; });\n' +
      '      return { failed, instantiateWasm(imports, receive) {\n' +
      '        Promise.resolve(module).then((m) => WebAssembly.instantiate(m, imports)).then((instance) => receive(instance), fail);\n' +
      '        return {};\n' +
      '      } };\n' +
      '    };\n' +
      '  };\n' +
      '  /**\n' +
      '   * A fresh runtime on the compiled module, instantiated synchronously (no bytes are compiled, so\n' +
      '   * workerd allows it): its embind binding, to drive without awaiting on every call. Each call is an\n' +
      '   * instance of its own; xgrammar aborts its instance on a fatal error, and `printErr` hears why.\n' +
      '   */\n' +
      '  exports.instantiateSync = (module, printErr) => {\n' +
      '    const arg = { printErr, instantiateWasm(imports, receive) { return receive(new WebAssembly.Instance(module, imports)); } };\n' +
      '    Module(arg).catch(() => {}); // an abort later rejects the ready promise too; the caller hears it by the throw\n' +
      '    if (!arg.calledRun) throw new Error("xgrammar: the runtime did not start synchronously");\n' +
      '    return arg;\n' +
      '  };\n',
  );
  const banner =
    `// GENERATED by scripts/xgrammar-vendor.ts from @mlc-ai/web-xgrammar ${version} (Apache-2.0,\n` +
    '// https://github.com/mlc-ai/xgrammar). Do not edit: change the script and run it again.\n' +
    '/* eslint-disable */\n// @ts-nocheck\n';
  return { glue: banner + src, wasm, version };
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  const { glue, wasm, version } = vendorXgrammar();
  writeFileSync(`${OUT}xgrammar-glue.js`, glue);
  writeFileSync(`${OUT}xgrammar.wasm`, wasm);
  console.log(`xgrammar ${version}: glue ${glue.length} bytes, wasm ${wasm.length} bytes → ${OUT}`);
}
