/**
 * The one GPUDevice a WebGPU engine uses: onnxruntime-web's WebGPU execution provider runs the model on
 * it and our WGSL kernels (shaders/) run beside it, so KV buffers and logits pass between the two
 * without a trip through the CPU. Works wherever `navigator.gpu` exists (browsers, Deno, Node with the
 * `webgpu` package's Dawn installed as navigator.gpu); knows nothing of how it got there.
 */

/** Features requested when the adapter has them: ORT uses shader-f16 and subgroups when present. */
const OPTIONAL_FEATURES: GPUFeatureName[] = ['shader-f16', 'subgroups' as GPUFeatureName, 'timestamp-query'];

/** Limits raised to what the adapter offers: KV pools and model weights want large storage buffers. */
const RAISED_LIMITS = [
  'maxBufferSize',
  'maxStorageBufferBindingSize',
  'maxComputeWorkgroupStorageSize',
  'maxComputeInvocationsPerWorkgroup',
  'maxComputeWorkgroupSizeX',
  'maxComputeWorkgroupSizeY',
  'maxComputeWorkgroupSizeZ',
  'maxComputeWorkgroupsPerDimension',
  'maxStorageBuffersPerShaderStage',
] as const;

export interface GpuContext {
  readonly adapter: GPUAdapter;
  readonly device: GPUDevice;
  /** Adapter description for logs and /metrics, e.g. "llvmpipe (LLVM 19.1.7, 256 bits)". */
  readonly description: string;
}

/** The platform's WebGPU entry point, or undefined where there is none (workerd today). */
export function platformGpu(): GPU | undefined {
  const nav = (globalThis as { navigator?: { gpu?: GPU } }).navigator;
  return nav?.gpu ?? undefined;
}

/** An adapter, or null when WebGPU is absent or offers none (no driver). */
export async function requestGpuAdapter(gpu: GPU | undefined = platformGpu()): Promise<GPUAdapter | null> {
  if (!gpu) return null;
  try {
    return await gpu.requestAdapter({ powerPreference: 'high-performance' });
  } catch {
    return null;
  }
}

/** A device on `adapter` with the features and limits both ORT and our kernels need. */
export async function createGpuContext(adapter: GPUAdapter): Promise<GpuContext> {
  const requiredFeatures = OPTIONAL_FEATURES.filter((f) => adapter.features.has(f));
  const requiredLimits: Record<string, number> = {};
  for (const name of RAISED_LIMITS) {
    const value = (adapter.limits as unknown as Record<string, number | undefined>)[name];
    if (typeof value === 'number') requiredLimits[name] = value;
  }
  const device = await adapter.requestDevice({ requiredFeatures, requiredLimits });
  const info = adapter.info;
  const description =
    [info?.vendor, info?.architecture, info?.device, info?.description].filter((s) => s).join(' ') || 'unknown adapter';
  return { adapter, device, description };
}
