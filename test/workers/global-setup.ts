// Runs in Node before the workerd tests: makes the models (served to workerd by the assets binding) and
// computes what the engine gives in Node, so the tests inside workerd can compare against it.
import { join } from 'node:path';
import type { TestProject } from 'vitest/node';
import { ensureModels, MODELS_DIR } from '../../scripts/ensure-models.js';
import { edgeKernelsModule } from '../../src/backends/edge-kernels-node.js';
import { instantiateKernels } from '../../src/engine/runners/wasm/edge-kernels.js';
import { collect, loadEngine } from '../helpers/engines.js';
import { writeGgufFolder } from '../helpers/gguf-folder.js';
import { quantProbe } from '../helpers/quant-layout.js';
import { WORKERD_CASES, type NodeExpectations } from './cases.js';

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
  for (const build of ['baseline', 'relaxed'] as const) {
    const { kernels, memory } = await instantiateKernels(edgeKernelsModule(build));
    probes[build] = quantProbe({ k: kernels, mem: memory });
  }
  project.provide('nodeKernelProbe', probes);
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
 * A Q4_K_M GGUF folder as `model:import gguf` writes it (models/tiny-gguf, served by the assets binding), and
 * its greedy tokens on the kernels in Node, for the GGUF test inside workerd.
 */
async function ggufGreedyInNode(): Promise<number[]> {
  await writeGgufFolder(join(MODELS_DIR, 'tiny-gguf'));
  const engine = await loadEngine('kernels', 'tiny-gguf');
  const tokens = (await collect(engine, WORKERD_CASES.greedy)).done.tokenIds;
  await engine.runner.release();
  return tokens;
}
