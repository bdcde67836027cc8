// Runs in Node before the workerd tests: makes the models (served to workerd by the assets binding) and
// computes what the engine gives in Node, so the tests inside workerd can compare against it.
import { join } from 'node:path';
import type { TestProject } from 'vitest/node';
import { ensureModels, MODELS_DIR } from '../../scripts/ensure-models.js';
import { edgeKernelsModule, KERNELS_BUILDS } from '../../src/backends/edge-kernels-node.js';
import { probeDotLowering } from '../../src/engine/runners/wasm/dot-lowering.js';
import { instantiateKernels } from '../../src/engine/runners/wasm/edge-kernels.js';
import { collect, loadEngine } from '../helpers/engines.js';
import { writeGgufFolder } from '../helpers/gguf-folder.js';
import { kernelProbe } from '../helpers/kernel-probe.js';
import { GGUF_FOLDERS, WORKERD_CASES, type NodeExpectations } from './cases.js';

export default async function setup(project: TestProject): Promise<void> {
  ensureModels();
  const expectations: NodeExpectations = { cpu: {}, kernels: {}, 'ort-wasm': {} };
  for (const backend of ['cpu', 'kernels', 'ort-wasm'] as const) {
    const engine = await loadEngine(backend);
    for (const [name, request] of Object.entries(WORKERD_CASES)) {
      expectations[backend][name] = (await collect(engine, request)).done.tokenIds;
    }
    await engine.runner.release();
  }
  project.provide('nodeExpectations', expectations);
  project.provide('nodeInt8Kv', await int8KvInNode());
  project.provide('nodeGgufGreedy', await ggufGreedyInNode());
  const probes: Record<string, Record<string, number[]>> = {};
  for (const build of KERNELS_BUILDS) {
    const { kernels, memory } = await instantiateKernels(edgeKernelsModule(build));
    probes[build] = kernelProbe(kernels, memory);
  }
  project.provide('nodeKernelProbe', probes);
  project.provide('nodeDotLowering', probeDotLowering(edgeKernelsModule('dot-add')));
}

/** Each case's tokens on the kernels in Node with an 8-bit KV pool (KV_DTYPE int8), for the same run in workerd. */
async function int8KvInNode(): Promise<Record<string, number[]>> {
  const engine = await loadEngine('kernels', 'tiny', { kvDtype: 'int8' });
  const out: Record<string, number[]> = {};
  for (const [name, request] of Object.entries(WORKERD_CASES))
    out[name] = (await collect(engine, request)).done.tokenIds;
  await engine.runner.release();
  return out;
}

/**
 * GGUF folders as `model:import gguf` writes them (served by the assets binding): tiny-256 in Q4_K_M
 * (models/tiny-gguf), and Qwen2's, Qwen3's and Gemma 3's blocks in Q8_0; and their greedy tokens on the kernels in Node,
 * for the GGUF tests inside workerd.
 */
async function ggufGreedyInNode(): Promise<Record<string, number[]>> {
  const out: Record<string, number[]> = {};
  for (const [folder, preset, type] of GGUF_FOLDERS) {
    await writeGgufFolder(join(MODELS_DIR, folder), preset, type);
    const engine = await loadEngine('kernels', folder);
    out[folder] = (await collect(engine, WORKERD_CASES.greedy)).done.tokenIds;
    await engine.runner.release();
  }
  return out;
}
