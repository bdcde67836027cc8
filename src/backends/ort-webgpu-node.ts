import { readFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { dirname } from 'node:path';
import { pathToFileURL } from 'node:url';
import { setFlagsFromString } from 'node:v8';
import { createGpuContext, platformGpu, requestGpuAdapter, type GpuContext } from '../engine/runners/webgpu/device.js';
import type { ShaderSource } from '../engine/runners/webgpu/wgsl-kernels.js';
import { webGpuRuntime, type WebGpuRuntime } from './ort-webgpu.js';
import { edgeKernelsModule } from './edge-kernels-node.js';
import { xgrammarModule } from './xgrammar-node.js';

/**
 * WebGPU in Node (docs/platform.md, "WebGPU"): the `webgpu` package's Dawn as `navigator.gpu`, which on a
 * machine without a GPU runs on Mesa's lavapipe Vulkan driver (bookworm-backports' Mesa 25). Two fixes
 * onnxruntime-web needs there are applied once per process:
 * - Dawn's GPUQueue.writeBuffer rejects SharedArrayBuffer-backed data ("Invalid argument"), which is
 *   what ORT's wasm heap is: such data is copied into a plain buffer first.
 * - V8 would spend ~30 s and 2 GB optimising ORT's 27 MB wasm (after the work is done, at exit):
 *   `--liftoff-only` keeps it on the baseline compiler. Set here before the wasm is compiled; test
 *   workers are also started with the flag (vitest.config.ts).
 */

let installed: Promise<GPU | undefined> | undefined;

/** navigator.gpu from Dawn, unless the platform already has one; undefined if the package is absent. */
export function installNodeWebGpu(): Promise<GPU | undefined> {
  installed ??= (async () => {
    const existing = platformGpu();
    if (existing) return existing;
    process.env.XDG_RUNTIME_DIR ??= '/tmp'; // Mesa warns on every start without it
    let dawn: { create(options: string[]): GPU; globals: Record<string, unknown> };
    try {
      // A dev dependency: Node hosts without it simply have no WebGPU.
      dawn = (await import('webgpu')) as unknown as typeof dawn;
    } catch {
      return undefined;
    }
    Object.assign(globalThis, dawn.globals);
    const gpu = dawn.create([]);
    const host = globalThis as { navigator?: object };
    host.navigator ??= {};
    const nav = host.navigator as { gpu?: GPU };
    Object.defineProperty(nav, 'gpu', { value: gpu, configurable: true });
    patchWriteBuffer();
    return gpu;
  })();
  return installed;
}

function patchWriteBuffer(): void {
  const proto = (globalThis as { GPUQueue?: { prototype: GPUQueue } }).GPUQueue?.prototype;
  if (!proto || (proto as { __sabSafe?: boolean }).__sabSafe) return;
  const original = proto.writeBuffer;
  proto.writeBuffer = function (
    this: GPUQueue,
    buffer: GPUBuffer,
    offset: number,
    data: BufferSource | SharedArrayBuffer,
    dataOffset?: number,
    size?: number,
  ) {
    if (typeof SharedArrayBuffer !== 'undefined') {
      const backing = ArrayBuffer.isView(data) ? data.buffer : data;
      if (backing instanceof SharedArrayBuffer) {
        // Copy the bytes the view covers; dataOffset and size are in elements of a typed array.
        const view = ArrayBuffer.isView(data) ? data : new Uint8Array(data);
        const Ctor = view.constructor as new (n: ArrayBuffer) => ArrayBufferView<ArrayBuffer>;
        const copy = new Uint8Array(view.byteLength);
        copy.set(new Uint8Array(view.buffer, view.byteOffset, view.byteLength));
        data = ArrayBuffer.isView(data) && !(data instanceof DataView) ? new Ctor(copy.buffer) : copy;
      }
    }
    return original.call(this, buffer, offset, data as BufferSource, dataOffset, size);
  } as GPUQueue['writeBuffer'];
  (proto as { __sabSafe?: boolean }).__sabSafe = true;
}

/** A Dawn adapter in Node, or null (no `webgpu` package, no Vulkan driver). */
export async function nodeGpuAdapter(): Promise<GPUAdapter | null> {
  return requestGpuAdapter(await installNodeWebGpu());
}

let context: Promise<GpuContext | null> | undefined;

/** The process's one GPU context (ORT sessions and our kernels share it), or null without an adapter. */
export function nodeGpuContext(): Promise<GpuContext | null> {
  context ??= (async () => {
    const adapter = await nodeGpuAdapter();
    return adapter ? createGpuContext(adapter) : null;
  })();
  return context;
}

/** Why there is no WebGPU here, for skip messages and errors. */
export const NO_ADAPTER_MESSAGE =
  'no WebGPU adapter: install a Vulkan driver (Debian 12: mesa-vulkan-drivers from bookworm-backports, and libvulkan1; .ci/run does)';

/** onnxruntime-web's WebGPU EP in Node; throws with NO_ADAPTER_MESSAGE when no adapter exists. */
export async function webGpuRuntimeForNode(): Promise<WebGpuRuntime> {
  setFlagsFromString('--liftoff-only');
  const gpu = await nodeGpuContext();
  if (!gpu) throw new Error(NO_ADAPTER_MESSAGE);
  const dist = dirname(createRequire(import.meta.url).resolve('onnxruntime-web'));
  return {
    ...webGpuRuntime(gpu, nodeShaderSource, { wasmPaths: `${pathToFileURL(dist).href}/` }),
    grammar: xgrammarModule(),
    // The kernels' module reads GGUF files for the WGSL pass (their loaders place and repack the blocks).
    kernels: edgeKernelsModule('baseline'),
  };
}

/** Our WGSL kernels from the repository's shaders/ folder. */
export const nodeShaderSource: ShaderSource = (name) =>
  readFile(new URL(`../../shaders/${name}.wgsl`, import.meta.url), 'utf8');
