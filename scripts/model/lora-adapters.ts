// Small deterministic LoRA adapters in PEFT's layout (adapter_config.json + adapter_model.safetensors) for a
// base model folder, written under its adapters/<name>/ with adapters/index.json listing them: what the tests,
// the e2e and the bench serve (docs/models.md, "LoRA adapters").
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { roundTo, writeSafetensors, type SafeDtype, type SafeTensor } from '../../src/engine/adapters/safetensors.js';
import { mulberry32 } from '../lib/mulberry32.js';

export type TargetModule = 'q_proj' | 'k_proj' | 'v_proj' | 'o_proj' | 'gate_proj' | 'up_proj' | 'down_proj';

export interface TestAdapter {
  name: string;
  rank: number;
  alpha: number;
  modules: readonly TargetModule[];
  rslora?: boolean;
  seed: number;
  /** The file's element type (default F32); its values are the generator's rounded to it. */
  dtype?: SafeDtype;
}

/** The adapters every `npm run models` base with adapters gets: ranks 4 to 16, attention, MLP, all, rsLoRA; F32, F16, BF16. */
export const TEST_ADAPTERS: readonly TestAdapter[] = [
  { name: 'qv-r8', rank: 8, alpha: 16, modules: ['q_proj', 'v_proj'], seed: 11 },
  { name: 'attn-r12', rank: 12, alpha: 12, modules: ['q_proj', 'k_proj', 'v_proj', 'o_proj'], seed: 12, dtype: 'F16' },
  {
    name: 'mlp-r4-rs',
    rank: 4,
    alpha: 8,
    modules: ['gate_proj', 'up_proj', 'down_proj'],
    rslora: true,
    seed: 13,
    dtype: 'BF16',
  },
  {
    name: 'all-r16',
    rank: 16,
    alpha: 32,
    modules: ['q_proj', 'k_proj', 'v_proj', 'o_proj', 'gate_proj', 'up_proj', 'down_proj'],
    seed: 14,
  },
];

/** Each module's (in, out) from a config.json. */
export function moduleDims(config: Record<string, number>): Record<TargetModule, [number, number]> {
  const H = config.hidden_size;
  const hd = config.head_dim ?? H / config.num_attention_heads;
  const Q = config.num_attention_heads * hd;
  const KV = config.num_key_value_heads * hd;
  const I = config.intermediate_size;
  return {
    q_proj: [H, Q],
    k_proj: [H, KV],
    v_proj: [H, KV],
    o_proj: [Q, H],
    gate_proj: [H, I],
    up_proj: [H, I],
    down_proj: [I, H],
  };
}

/**
 * The adapter's tensors: A uniform in ±1/sqrt(in) (as PEFT's Kaiming init), B uniform in ±0.5/sqrt(rank) (PEFT
 * starts B at zero; a trained one is not), so the update moves the model's greedy tokens.
 */
export function adapterTensors(config: Record<string, number>, a: TestAdapter): Map<string, SafeTensor> {
  const dims = moduleDims(config);
  const next = mulberry32(a.seed);
  const uniform = (n: number, bound: number): Float32Array =>
    roundTo(
      Float32Array.from({ length: n }, () => (next() * 2 - 1) * bound),
      a.dtype ?? 'F32',
    );
  const out = new Map<string, SafeTensor>();
  for (let layer = 0; layer < config.num_hidden_layers; layer++)
    for (const m of a.modules) {
      const [K, N] = dims[m];
      const block = m.endsWith('_proj') && ['gate_proj', 'up_proj', 'down_proj'].includes(m) ? 'mlp' : 'self_attn';
      const key = `base_model.model.model.layers.${layer}.${block}.${m}`;
      out.set(`${key}.lora_A.weight`, { dims: [a.rank, K], data: uniform(a.rank * K, 1 / Math.sqrt(K)) });
      out.set(`${key}.lora_B.weight`, { dims: [N, a.rank], data: uniform(N * a.rank, 0.5 / Math.sqrt(a.rank)) });
    }
  return out;
}

/** PEFT's adapter_config.json for `a` on `baseModel`. */
export function adapterConfig(a: TestAdapter, baseModel: string): Record<string, unknown> {
  return {
    peft_type: 'LORA',
    task_type: 'CAUSAL_LM',
    base_model_name_or_path: baseModel,
    r: a.rank,
    lora_alpha: a.alpha,
    lora_dropout: 0,
    target_modules: a.modules,
    use_rslora: a.rslora === true,
    use_dora: false,
    fan_in_fan_out: false,
    bias: 'none',
  };
}

/** Writes `adapters` under `baseDir`/adapters/ and lists them in adapters/index.json. */
export function writeTestAdapters(baseDir: string, baseModel: string, adapters = TEST_ADAPTERS): void {
  const config = JSON.parse(readFileSync(join(baseDir, 'config.json'), 'utf8')) as Record<string, number>;
  for (const a of adapters) {
    const dir = join(baseDir, 'adapters', a.name);
    mkdirSync(dir, { recursive: true });
    writeFileSync(join(dir, 'adapter_config.json'), `${JSON.stringify(adapterConfig(a, baseModel), null, 2)}\n`);
    writeFileSync(join(dir, 'adapter_model.safetensors'), writeSafetensors(adapterTensors(config, a), a.dtype));
  }
  writeFileSync(join(baseDir, 'adapters', 'index.json'), `${JSON.stringify(adapters.map((a) => a.name))}\n`);
}

/** An adapter over the rank limit, not listed in index.json: what the service's 400 for a bad adapter is tested on. */
export function writeBrokenAdapter(baseDir: string, baseModel: string): void {
  const a = { ...TEST_ADAPTERS[0], name: 'broken-rank' };
  const config = JSON.parse(readFileSync(join(baseDir, 'config.json'), 'utf8')) as Record<string, number>;
  const dir = join(baseDir, 'adapters', a.name);
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, 'adapter_config.json'), JSON.stringify({ ...adapterConfig(a, baseModel), r: 128 }));
  writeFileSync(join(dir, 'adapter_model.safetensors'), writeSafetensors(adapterTensors(config, a)));
}
