import { basename } from 'node:path';
import type { EngineLimits } from '../engine/defaults.js';
import { loadModel } from '../engine/model-load.js';
import type { ModelDtype } from '../engine/model/model-files.js';
import type { EngineRuntime } from '../engine/model/runtime.js';
import { isGpuRuntime } from '../engine/runners/webgpu/gpu-runtime.js';
import { HOST_PROTOCOL } from '../engine/runners/remote/host-protocol.js';
import { directorySource } from '../sources/directory-source.js';
import type { HostModel } from './gpu-host.js';

/**
 * A model folder loaded for a GPU host: the runner create-runner builds for `runtime` (our kernels, onnxruntime,
 * WebGPU), its weights digested as they load, and a runner per session over them. `name` is the model as objects
 * name it (their MODEL; the folder's name by default).
 */
export async function loadHostModel(
  runtime: EngineRuntime,
  folder: string,
  options: {
    name?: string;
    dtype?: ModelDtype;
    limits: EngineLimits;
    /** Bytes kept for the folder's LoRA adapters (default: ADAPTER_CACHE_DEFAULT_BYTES where it has any). */
    adapterCacheBytes?: number;
  },
): Promise<HostModel> {
  const loaded = await loadModel(
    runtime,
    directorySource(folder),
    { dtype: options.dtype, dtypeOption: '--dtype', digest: true, adapterCacheBytes: options.adapterCacheBytes },
    options.limits,
  );
  const first = await loaded.takeRunner(options.limits);
  let spare: typeof first | undefined = first;
  return {
    info: {
      protocol: HOST_PROTOCOL,
      model: options.name ?? basename(folder.replace(/\/+$/, '')),
      runner: first.name,
      backend: runtime.name,
      adapter: isGpuRuntime(runtime) ? runtime.gpu.description : null,
    },
    config: loaded.config,
    dtype: loaded.dtype,
    digest: loaded.digest,
    weightBytes: loaded.weightBytes,
    limits: options.limits,
    adapters: first.rowAdapters && loaded.adapters.capacityBytes > 0 ? loaded.adapters : undefined,
    runner: async (limits) => {
      const runner = spare ?? (await loaded.takeRunner(limits));
      spare = undefined;
      return runner;
    },
  };
}
