// webgpu versus wasm: aggregate greedy decode tokens/s of the same model on onnxruntime-web's WASM
// (OnnxRunner), its WebGPU EP with the KV cache crossing to the CPU each step (OnnxRunner), and the
// WebGPU EP with the KV cache kept on the device (GpuRunner: our gather / scatter kernels), and
// that plus the logits kept there too, the token picked by our fused argmax (greedy.wgsl). All
// four are loaded at once and each run measures them side by side in rotating order; the table gives
// medians over runs and ratios to wasm taken run by run. On lavapipe (a CPU pretending to be a GPU) the
// numbers say nothing about GPUs; they show the path works and what it costs there.
//
//   node --liftoff-only --import tsx scripts/bench/webgpu.ts [--model models/tiny] [--runs 3]
//     [--batches 1,4] [--prompt 32] [--tokens 32] [--json out.json]
// Exported as runWebGpuBench() for scripts/bench.ts.
import { writeFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { answerHelp } from '../lib/help.js';
import { nodeShaderSource, webGpuRuntimeForNode } from '../../src/backends/ort-webgpu-node.js';
import { webWasmRuntimeForNode } from '../../src/backends/ort-web-node.js';
import { DeviceSampler } from '../../src/engine/runners/webgpu/device-sampler.js';
import { GpuRunner } from '../../src/engine/runners/webgpu/gpu-runner.js';
import { WgslKernels } from '../../src/engine/runners/webgpu/wgsl-kernels.js';
import { BlockPool } from '../../src/engine/kv/block-pool.js';
import { KvCacheManager } from '../../src/engine/kv/paged-kv.js';
import { loadModelFiles } from '../../src/engine/model/model-files.js';
import { OnnxRunner } from '../../src/engine/runners/ort/onnx-runner.js';
import type { ModelRunner, StepLogits, StepRow } from '../../src/engine/runners/model-runner.js';
import { argmax } from '../../src/engine/sampling/processors.js';
import { directorySource } from '../../src/sources/directory-source.js';
import { median } from './stats.js';
import { webGpuBenchTable, type WebGpuBenchRow } from './webgpu-table.js';

export type { WebGpuBenchRow } from './webgpu-table.js';

export interface WebGpuBenchOptions {
  model: string;
  runs: number;
  batches: number[];
  promptTokens: number;
  decodeTokens: number;
}

interface Path {
  name: string;
  /** One pass and each row's greedy token. */
  step(rows: readonly StepRow[]): Promise<number[]>;
  manager: KvCacheManager;
}

const onCpu = (forward: (rows: readonly StepRow[]) => Promise<StepLogits>) => async (rows: readonly StepRow[]) => {
  const logits = await forward(rows);
  return rows.map((_, b) => argmax(logits.last(b)));
};

async function decodeRun(path: Path, batch: number, prompt: number, tokens: number, seed: number): Promise<number> {
  const seqs = Array.from({ length: batch }, () => path.manager.create());
  let feeds = seqs.map((_, b) => Array.from({ length: prompt }, (_, i) => 3 + ((seed * 31 + b * 7 + i * 13) % 500)));
  const step = async () => {
    seqs.forEach((kv, b) => {
      if (!path.manager.reserve(kv, feeds[b].length)) throw new Error('KV pool too small for the bench');
    });
    const next = await path.step(seqs.map((kv, b) => ({ kv, tokens: feeds[b] })));
    feeds = next.map((t) => [t]);
  };
  await step(); // prefill, not timed
  const t0 = performance.now();
  for (let i = 0; i < tokens; i++) await step();
  const seconds = (performance.now() - t0) / 1000;
  for (const kv of seqs) path.manager.free(kv);
  return (batch * tokens) / seconds;
}

export async function runWebGpuBench(
  o: WebGpuBenchOptions,
  log: (s: string) => void = console.error,
): Promise<WebGpuBenchRow[]> {
  const files = await loadModelFiles(directorySource(o.model), 'fp32');
  const blocks = Math.max(...o.batches) * Math.ceil((o.promptTokens + o.decodeTokens + 1) / 16) + 4;
  /** A pool of `blocks` in the memory `runner` provides (each runner makes its pool's memory once). */
  const manager = (runner: ModelRunner) => {
    runner.createKvMemory(files.config, blocks, 16, 'fp32');
    return new KvCacheManager(new BlockPool(files.config, blocks, 16), 'bench');
  };
  const wasmRunner = await OnnxRunner.create(webWasmRuntimeForNode(), files.onnx, files.config);
  const gpuRuntime = await webGpuRuntimeForNode();
  const gpuCpuKv = await OnnxRunner.create(gpuRuntime, files.onnx, files.config);
  const kernels = await WgslKernels.create(gpuRuntime.gpu.device, nodeShaderSource, [
    'kv-gather',
    'kv-scatter',
    'greedy',
  ]);
  const gpuDeviceKv = await GpuRunner.create(gpuRuntime, files.onnx, files.config, kernels);
  const gpuAll = await GpuRunner.create(gpuRuntime, files.onnx, files.config, kernels, { logitsOnDevice: true });
  const sampler = new DeviceSampler(kernels, files.config.vocabSize);
  const paths: Path[] = [
    { name: 'wasm', step: onCpu((r) => wasmRunner.forward(r)), manager: manager(wasmRunner) },
    { name: 'webgpu (KV via CPU)', step: onCpu((r) => gpuCpuKv.forward(r)), manager: manager(gpuCpuKv) },
    { name: 'webgpu (KV on device)', step: onCpu((r) => gpuDeviceKv.forward(r)), manager: manager(gpuDeviceKv) },
    {
      name: 'webgpu (KV and argmax on device)',
      step: async (rows) => {
        const logits = await gpuAll.forwardOnDevice(rows);
        const picked = await sampler.greedy(logits.buffer, logits.lastStarts());
        logits.release();
        return picked.map((p) => p.tokenId);
      },
      manager: manager(gpuAll),
    },
  ];
  log(`webgpu bench on ${gpuRuntime.gpu.description}`);
  for (const p of paths) await decodeRun(p, 1, 8, 4, 0); // warm-up: shader compiles, first allocations

  const samples = new Map<string, number[]>();
  for (let run = 0; run < o.runs; run++) {
    for (const batch of o.batches) {
      const order = paths.map((_, i) => paths[(i + run) % paths.length]);
      for (const p of order) {
        const tps = await decodeRun(p, batch, o.promptTokens, o.decodeTokens, run);
        const key = `${p.name}|${batch}`;
        samples.set(key, [...(samples.get(key) ?? []), tps]);
        log(`run ${run + 1}/${o.runs} batch ${batch} ${p.name}: ${tps.toFixed(1)} tok/s`);
      }
    }
  }
  await Promise.all([wasmRunner.release(), gpuCpuKv.release(), gpuDeviceKv.release(), gpuAll.release()]);
  const rows: WebGpuBenchRow[] = [];
  for (const batch of o.batches) {
    const wasm = samples.get(`wasm|${batch}`)!;
    for (const p of paths) {
      const runs = samples.get(`${p.name}|${batch}`)!;
      rows.push({
        path: p.name,
        batch,
        tokensPerS: runs,
        median: median(runs),
        vsWasm: median(runs.map((x, i) => x / wasm[i])),
      });
    }
  }
  return rows;
}

if (import.meta.url === `file://${process.argv[1]}`) {
  answerHelp(`Usage: npm run bench:webgpu -- [--model models/tiny] [--runs 3] [--batches 1,4] [--prompt 32] [--tokens 32] [--json FILE]
Decode speed on WebGPU (Dawn through the webgpu package; lavapipe where there is no GPU), printed as a table.`);
  const { values } = parseArgs({
    options: {
      model: { type: 'string', default: 'models/tiny' },
      runs: { type: 'string', default: '3' },
      batches: { type: 'string', default: '1,4' },
      prompt: { type: 'string', default: '32' },
      tokens: { type: 'string', default: '32' },
      json: { type: 'string' },
    },
  });
  const rows = await runWebGpuBench({
    model: values.model!,
    runs: Number(values.runs),
    batches: values.batches!.split(',').map(Number),
    promptTokens: Number(values.prompt),
    decodeTokens: Number(values.tokens),
  });
  if (values.json) writeFileSync(values.json, `${JSON.stringify(rows, null, 1)}\n`);
  console.log(webGpuBenchTable(rows));
}
