import { attentionWgsl } from './wgsl-attention.js';
import { LORA_WGSL } from './wgsl-lora.js';
import { matmulWgsl } from './wgsl-matmul.js';
import { EMBED_WGSL, RMSNORM_WGSL, ropeKvWgsl } from './wgsl-ops.js';

/** The WGSL pass's kernels: its shaders compiled once per device (the text lives in the modules beside). */
export interface PassPipelines {
  matmul: GPUComputePipeline;
  rmsnorm: GPUComputePipeline;
  rmsnormInPlace: GPUComputePipeline;
  ropeKv: GPUComputePipeline;
  ropeKvF16: GPUComputePipeline;
  embed: GPUComputePipeline;
  attention: GPUComputePipeline;
  attentionF16: GPUComputePipeline;
  loraA: GPUComputePipeline;
  loraB: GPUComputePipeline;
}

const sources = (subgroups: boolean) =>
  ({
    matmul: [matmulWgsl(subgroups), 'main'],
    rmsnorm: [RMSNORM_WGSL, 'main'],
    rmsnormInPlace: [RMSNORM_WGSL, 'inplace'],
    ropeKv: [ropeKvWgsl(false), 'main'],
    ropeKvF16: [ropeKvWgsl(true), 'main'],
    embed: [EMBED_WGSL, 'main'],
    attention: [attentionWgsl(false), 'main'],
    attentionF16: [attentionWgsl(true), 'main'],
    loraA: [LORA_WGSL, 'lora_a'],
    loraB: [LORA_WGSL, 'lora_b'],
  }) satisfies Record<keyof PassPipelines, readonly [string, string]>;

/**
 * Compiles every kernel; a WGSL error rejects with the compiler's messages. `subgroups` (default: where the
 * device has the feature) picks the products' subgroup reduction over the workgroup-memory tree.
 */
export async function createPassPipelines(
  device: GPUDevice,
  subgroups = device.features.has('subgroups' as GPUFeatureName),
): Promise<PassPipelines> {
  const modules = new Map<string, GPUShaderModule>();
  const out = {} as Record<keyof PassPipelines, GPUComputePipeline>;
  for (const [name, [code, entryPoint]] of Object.entries(sources(subgroups)) as [
    keyof PassPipelines,
    readonly [string, string],
  ][]) {
    let module = modules.get(code);
    if (!module) {
      module = device.createShaderModule({ label: name, code });
      const info = await module.getCompilationInfo();
      const errors = info.messages.filter((m) => m.type === 'error');
      if (errors.length)
        throw new Error(
          `WGSL pass, ${name}: ${errors.map((m) => `${m.lineNum}:${m.linePos} ${m.message}`).join('; ')}`,
        );
      modules.set(code, module);
    }
    out[name] = await device.createComputePipelineAsync({
      label: name,
      layout: 'auto',
      compute: { module, entryPoint },
    });
  }
  return out;
}
