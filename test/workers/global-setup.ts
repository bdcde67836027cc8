// Runs in Node before the workerd tests: makes the models (served to workerd by the assets binding) and
// computes what the engine gives in Node, so the tests inside workerd can compare against it.
import type { TestProject } from 'vitest/node';
import { ensureModels } from '../../scripts/ensure-models.js';
import { edgeKernelsModule } from '../../src/backends/edge-kernels-node.js';
import { instantiateKernels } from '../../src/engine/kernels/edge-kernels.js';
import { collect, loadEngine } from '../helpers/engines.js';
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
  const probes: Record<string, Record<string, number[]>> = {};
  for (const build of ['baseline', 'relaxed'] as const) {
    const { kernels, memory } = await instantiateKernels(edgeKernelsModule(build));
    probes[build] = quantProbe({ k: kernels, mem: memory });
  }
  project.provide('nodeKernelProbe', probes);
}
