// The WebGPU context the tests in this folder share, or the reason they skip. In CI (CI is set; .ci/run
// installs the driver) or with EDGE_INFER_REQUIRE_WEBGPU=1, a missing adapter fails instead.
import { NO_ADAPTER_MESSAGE, nodeGpuContext } from '../../src/backends/ort-webgpu-node.js';
import type { GpuContext } from '../../src/engine/runners/webgpu/device.js';

export const gpu: GpuContext | null = await nodeGpuContext();

if (!gpu) {
  if (process.env.EDGE_INFER_REQUIRE_WEBGPU || process.env.CI)
    throw new Error(`WebGPU is required here (CI or EDGE_INFER_REQUIRE_WEBGPU) but there is ${NO_ADAPTER_MESSAGE}`);
  console.warn(`test/webgpu skipped: ${NO_ADAPTER_MESSAGE}`);
}

/** Suffix for describe() titles, so the skip's reason shows in the report. */
export const skipNote = gpu ? '' : ` (skipped: ${NO_ADAPTER_MESSAGE})`;
