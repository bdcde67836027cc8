// The float64 reference of an adapter (its weights merged into the base's) and each row's logits in one pass:
// what the adapter tests on the kernels (test/lora-adapters.test.ts) and on the WGSL pass
// (test/webgpu/wgsl-lora.test.ts) compare against.
import { adapterTensors, type TestAdapter } from '../../scripts/model/lora-adapters.js';
import type { LoraAdapter } from '../../src/engine/adapters/lora-adapter.js';
import { expect } from 'vitest';
import type { Engine } from '../../src/engine/engine.js';
import type { LlamaConfig } from '../reference/llama-reference.js';
import type { Tensor } from '../reference/onnx-weights.js';

const MODULE_WEIGHT: Record<string, string> = {
  q_proj: 'self_attn.q_proj',
  k_proj: 'self_attn.k_proj',
  v_proj: 'self_attn.v_proj',
  o_proj: 'self_attn.o_proj',
  gate_proj: 'mlp.gate_proj',
  up_proj: 'mlp.up_proj',
  down_proj: 'mlp.down_proj',
};

/** The base weights (HF names, (in, out) as the reference reads them) with the adapter merged in, in float64 rounded once. */
export function merged(weights: Map<string, Tensor>, config: LlamaConfig, a: TestAdapter): Map<string, Tensor> {
  const out = new Map(weights);
  const tensors = adapterTensors(config as unknown as Record<string, number>, a);
  const scale = a.rslora ? a.alpha / Math.sqrt(a.rank) : a.alpha / a.rank;
  for (let layer = 0; layer < config.num_hidden_layers; layer++)
    for (const m of a.modules) {
      const name = `model.layers.${layer}.${MODULE_WEIGHT[m]}.weight`;
      const w = weights.get(name)!;
      const [K, N] = w.dims;
      const key = `base_model.model.model.layers.${layer}.${MODULE_WEIGHT[m]}`;
      const A = tensors.get(`${key}.lora_A.weight`)!.data; // (r, K)
      const B = tensors.get(`${key}.lora_B.weight`)!.data; // (N, r)
      const data = new Float32Array(w.data.length);
      for (let i = 0; i < K; i++)
        for (let o = 0; o < N; o++) {
          let d = 0;
          for (let j = 0; j < a.rank; j++) d += B[o * a.rank + j] * A[j * K + i];
          data[i * N + o] = w.data[i * N + o] + scale * d;
        }
      out.set(name, { dims: w.dims, data });
    }
  return out;
}

/** Each row's last logits in one pass (row i with adapters[i]). */
export async function adapterPassLogits(
  engine: Engine,
  rows: { tokens: number[]; adapter?: LoraAdapter }[],
): Promise<number[][]> {
  const step = rows.map(({ tokens, adapter }) => {
    const kv = engine.kv.create(undefined, adapter);
    engine.kv.reserve(kv, tokens.length);
    return { kv, tokens };
  });
  const logits = await engine.runner.forward(step);
  const out = step.map((_r, i) => Array.from(logits.last(i)));
  for (const r of step) engine.kv.free(r.kv);
  return out;
}

/**
 * The mixed batch both runners are held to: base rows and rows of each adapter (`adapters`: rank 8 on q/v, attention,
 * MLP, all seven) in one pass, each row's logits the same bits as the row alone; and an adapter moves its row.
 */
export async function expectMixedBatchExact(engine: Engine, adapters: readonly LoraAdapter[]): Promise<void> {
  const [qv, attn, mlp, all] = adapters;
  const p = (text: string) => engine.tokenizer.encode(text);
  const rows = [
    { tokens: p('a base row first') },
    { tokens: p('an adapter row, longer than the first one'), adapter: qv },
    { tokens: p('another adapter'), adapter: all },
    { tokens: p('a base row again, last but one') },
    { tokens: p('the same adapter as row two'), adapter: qv },
    { tokens: p('attention and mlp'), adapter: attn },
    { tokens: p('mlp only, rsLoRA'), adapter: mlp },
  ];
  const batched = await adapterPassLogits(engine, rows);
  for (const [i, row] of rows.entries()) {
    const [alone] = await adapterPassLogits(engine, [row]);
    expect(batched[i], `row ${i}`).toEqual(alone);
  }
  // The adapter moved its rows: the same tokens without it give other logits.
  for (const i of [1, 2]) {
    const [bare] = await adapterPassLogits(engine, [{ tokens: rows[i].tokens }]);
    expect(bare).not.toEqual(batched[i]);
  }
}
