import { BufferUsage, MAP_MODE_READ } from './usage.js';
/**
 * Our WGSL kernels (shaders/*.wgsl), compiled once per device. The engine never reads files: the host
 * hands in a ShaderSource (Node reads the shaders/ folder; a browser build would import the text).
 */
export type ShaderSource = (name: KernelName) => Promise<string>;

export const KERNEL_NAMES = ['kv-gather', 'kv-scatter', 'greedy', 'sample'] as const;
export type KernelName = (typeof KERNEL_NAMES)[number];

export class WgslKernels {
  private constructor(
    readonly device: GPUDevice,
    private readonly pipelines: Map<KernelName, GPUComputePipeline>,
  ) {}

  /** Compiles the kernels (all by default); a WGSL error rejects with the compiler's messages. */
  static async create(
    device: GPUDevice,
    source: ShaderSource,
    names: readonly KernelName[] = KERNEL_NAMES,
  ): Promise<WgslKernels> {
    const pipelines = new Map<KernelName, GPUComputePipeline>();
    for (const name of names) {
      const module = device.createShaderModule({ label: name, code: await source(name) });
      const info = await module.getCompilationInfo();
      const errors = info.messages.filter((m) => m.type === 'error');
      if (errors.length)
        throw new Error(
          `shaders/${name}.wgsl: ${errors.map((m) => `${m.lineNum}:${m.linePos} ${m.message}`).join('; ')}`,
        );
      pipelines.set(
        name,
        await device.createComputePipelineAsync({
          label: name,
          layout: 'auto',
          compute: { module, entryPoint: 'main' },
        }),
      );
    }
    return new WgslKernels(device, pipelines);
  }

  pipeline(name: KernelName): GPUComputePipeline {
    const pipeline = this.pipelines.get(name);
    if (!pipeline) throw new Error(`kernel ${name} was not compiled`);
    return pipeline;
  }

  /** A bind group of `buffers` at bindings 0, 1, ... of `name`'s group 0. */
  bind(name: KernelName, buffers: readonly GPUBuffer[]): GPUBindGroup {
    return this.device.createBindGroup({
      layout: this.pipeline(name).getBindGroupLayout(0),
      entries: buffers.map((buffer, binding) => ({ binding, resource: { buffer } })),
    });
  }

  /** One compute pass of `name` into `encoder`: a dispatch of (x, y) workgroups per group of bound buffers. */
  encode(
    encoder: GPUCommandEncoder,
    name: KernelName,
    dispatches: readonly { buffers: readonly GPUBuffer[]; x: number; y?: number }[],
  ): void {
    const pass = encoder.beginComputePass({ label: name });
    pass.setPipeline(this.pipeline(name));
    for (const { buffers, x, y } of dispatches) {
      pass.setBindGroup(0, this.bind(name, buffers));
      pass.dispatchWorkgroups(x, y ?? 1);
    }
    pass.end();
  }

  /** Runs one dispatch of `name` over `buffers` now: encoded, submitted. */
  dispatch(name: KernelName, buffers: readonly GPUBuffer[], x: number, y = 1): void {
    const encoder = this.device.createCommandEncoder({ label: name });
    this.encode(encoder, name, [{ buffers, x, y }]);
    this.device.queue.submit([encoder.finish()]);
  }

  /** A buffer holding `data` (rounded up to 16 bytes; WebGPU wants multiples of 4, uniforms 16). */
  upload(data: ArrayBufferView<ArrayBuffer>, usage: GPUBufferUsageFlags, label?: string): GPUBuffer {
    const size = Math.max(16, Math.ceil(data.byteLength / 16) * 16);
    const buffer = this.device.createBuffer({
      label,
      size,
      usage: usage | BufferUsage.COPY_DST,
      mappedAtCreation: true,
    });
    new Uint8Array(buffer.getMappedRange()).set(new Uint8Array(data.buffer, data.byteOffset, data.byteLength));
    buffer.unmap();
    return buffer;
  }
}

/** Workgroups for `invocations` threads in groups of `size`, as a 2-D grid (65535 per dimension at most). */
export function grid(invocations: number, size = 64): { x: number; y: number } {
  const groups = Math.max(1, Math.ceil(invocations / size));
  const x = Math.min(groups, 65535);
  return { x, y: Math.ceil(groups / x) };
}

/** Copies `bytes` of a GPU buffer back to the CPU (tests and the few values that must come back). */
export async function readBuffer(
  device: GPUDevice,
  source: GPUBuffer,
  bytes: number,
  offset = 0,
): Promise<ArrayBuffer> {
  const size = Math.ceil(bytes / 4) * 4;
  const staging = device.createBuffer({ size, usage: BufferUsage.MAP_READ | BufferUsage.COPY_DST });
  try {
    const encoder = device.createCommandEncoder();
    encoder.copyBufferToBuffer(source, offset, staging, 0, size);
    device.queue.submit([encoder.finish()]);
    await staging.mapAsync(MAP_MODE_READ);
    return staging.getMappedRange().slice(0, bytes);
  } finally {
    staging.destroy();
  }
}
