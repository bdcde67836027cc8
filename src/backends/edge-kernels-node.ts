import { readFileSync } from 'node:fs';
import v8 from 'node:v8';
import { type DotLowering, eightBitExact, probeDotLowering } from '../engine/runners/wasm/dot-lowering.js';
import { KERNELS_MIN_PAGES } from '../engine/runners/wasm/edge-kernels.js';

/**
 * The builds of the kernels (kernels/build.sh), all giving the same bits where they run: baseline SIMD; relaxed SIMD's 8-bit
 * dot product as int16 pairs (Node 20's fastest); the same with a single row's tile 16 columns wide for the forms
 * stored by column (`relaxed-wide`: fewer loads, which workerd's V8 bounds-checks one by one); and that accumulating in int32
 * (`dot-add`: one VNNI instruction where V8 lowers it so, as workerd's does, and only there exact in its 8-bit
 * products: `eightBitExact`). The worker imports the last two.
 */
export const KERNELS_BUILDS = ['baseline', 'relaxed', 'relaxed-wide', 'dot-add'] as const;
export type KernelsBuild = (typeof KERNELS_BUILDS)[number];

const compiled = new Map<KernelsBuild, WebAssembly.Module>();
let relaxedWorks: boolean | undefined;
/** How this V8 lowers the dot-add build's int32 dot product, once asked for (EDGE_KERNELS_BUILD=dot-add). */
let dotAddLowering: DotLowering | undefined;

/** The build's file in src/engine/runners/wasm/ (kernels/build.sh writes each there under this name). */
export const kernelsFileName = (build: KernelsBuild): string =>
  `edge-kernels${build === 'baseline' ? '' : `-${build}`}.wasm`;

const file = (build: KernelsBuild): Uint8Array<ArrayBuffer> =>
  new Uint8Array(readFileSync(new URL(`../engine/runners/wasm/${kernelsFileName(build)}`, import.meta.url)));

/**
 * Node 20's V8 (11.3) has relaxed SIMD behind a flag, and its baseline compiler (Liftoff) computes
 * relaxed_dot_i8x16_i7x16 wrongly, while its optimising compiler is exact (docs/platform.md). So the relaxed build
 * is compiled with Liftoff and lazy compilation off (flags V8 reads while compiling; restored right after,
 * so nothing else, onnxruntime's 14 MB module included, pays for TurboFan up front), then checked on a
 * known dot product before it is trusted. `bytes`: another relaxed build (dot-add, or an attempt a bench compares).
 */
export function compileRelaxed(bytes: Uint8Array<ArrayBuffer> = file('relaxed')): WebAssembly.Module | undefined {
  v8.setFlagsFromString('--experimental-wasm-relaxed-simd');
  if (!WebAssembly.validate(bytes)) return undefined;
  v8.setFlagsFromString('--no-liftoff');
  v8.setFlagsFromString('--no-wasm-lazy-compilation');
  try {
    return new WebAssembly.Module(bytes);
  } finally {
    v8.setFlagsFromString('--liftoff');
    v8.setFlagsFromString('--wasm-lazy-compilation');
  }
}

/** Whether `module`'s dot product is exact here: random int8 activations against values 0..15. */
export function dotProbePasses(module: WebAssembly.Module): boolean {
  const memory = new WebAssembly.Memory({ initial: KERNELS_MIN_PAGES });
  const instance = new WebAssembly.Instance(module, { env: { memory } });
  const probe = instance.exports.probe_dot as (a: number, u: number) => number;
  const a = new Int8Array(memory.buffer, 1024, 16);
  const u = new Uint8Array(memory.buffer, 2048, 16);
  let exact = 0;
  for (let i = 0; i < 16; i++) {
    a[i] = ((i * 97 + 31) % 255) - 127;
    u[i] = (i * 7 + 3) % 16;
    exact += a[i] * u[i];
  }
  for (let call = 0; call < 3; call++) if (probe(1024, 2048) !== exact) return false;
  return true;
}

/**
 * Our WebAssembly kernels for Node, compiled once per process: the relaxed build where this V8 runs it
 * exactly, else the baseline build. EDGE_KERNELS_BUILD=baseline|relaxed|relaxed-wide|dot-add asks for one (the bench compares
 * them; tests check they agree bit for bit).
 */
export function edgeKernelsModule(build = preferredBuild()): WebAssembly.Module {
  let module = compiled.get(build);
  if (module) return module;
  if (build !== 'baseline') {
    module = compileRelaxed(file(build));
    if (!module || !dotProbePasses(module)) throw new Error('relaxed SIMD is not usable in this Node');
  } else module = new WebAssembly.Module(file('baseline'));
  compiled.set(build, module);
  return module;
}

/** The build edgeKernelsModule() gives by default here. */
export function preferredBuild(): KernelsBuild {
  const asked = process.env.EDGE_KERNELS_BUILD;
  if (asked === 'dot-add') {
    dotAddLowering ??= probeDotLowering(edgeKernelsModule('dot-add'));
    if (!eightBitExact(asked, dotAddLowering))
      throw new Error(
        `EDGE_KERNELS_BUILD=dot-add: this V8 lowers the int32 dot product as '${dotAddLowering}', where that build's ` +
          `8-bit products are not exact; it runs only where V8 fuses it into vpdpbusd (workerd on an AVX-VNNI host)`,
      );
  }
  if (KERNELS_BUILDS.includes(asked as KernelsBuild)) return asked as KernelsBuild;
  if (relaxedWorks === undefined) {
    try {
      const module = compileRelaxed();
      relaxedWorks = module !== undefined && dotProbePasses(module);
      if (relaxedWorks) compiled.set('relaxed', module!);
    } catch {
      relaxedWorks = false;
    }
  }
  return relaxedWorks ? 'relaxed' : 'baseline';
}
