import { InvalidRequestError } from '../errors.js';
import { sha256Hex } from '../kv/sha256.js';
import type { ModelConfig } from '../model/config.js';
import type { ModelSource } from '../model/model-files.js';
import { readSafetensors, type SafeTensor } from './safetensors.js';

/** The projections an adapter may change, in the order a layer computes them. */
export const LORA_MODULES = ['q_proj', 'k_proj', 'v_proj', 'o_proj', 'gate_proj', 'up_proj', 'down_proj'] as const;
export type LoraModule = (typeof LORA_MODULES)[number];

/** The largest rank served (Workers AI takes up to 32, vLLM's default max_lora_rank is 16; 64 covers both). */
export const MAX_LORA_RANK = 64;

/** Modules of other architectures' blocks: an adapter naming one was trained for another model. */
const FOREIGN_MODULES = [
  'query_key_value',
  'c_attn',
  'c_proj',
  'c_fc',
  'Wqkv',
  'qkv_proj',
  'gate_up_proj',
  'fc1',
  'fc2',
  'dense',
];

/**
 * One projection's low-rank update: out += scale · B (A x), A (r, in) and B (out, r) row-major, as PEFT stores them.
 * Emptied once a runner has copied them where it computes (KernelRunner: its linear memory), so they are held once.
 */
export interface LoraDelta {
  readonly rank: number;
  /** (rank, in) */
  a: Float32Array;
  /** (out, rank) */
  b: Float32Array;
  readonly in: number;
  readonly out: number;
}

/**
 * A LoRA adapter read from a PEFT folder (`adapter_config.json` + `adapter_model.safetensors`), checked against
 * the base model it is served on. Read-only once loaded: every row naming it reads the same arrays.
 */
export class LoraAdapter {
  constructor(
    readonly name: string,
    /** SHA-256 of its two files: what its rows' KV blocks are keyed by (a changed file is another adapter). */
    readonly identity: string,
    /** lora_alpha / r, or lora_alpha / sqrt(r) with use_rslora. */
    readonly scale: number,
    readonly rank: number,
    readonly baseModel: string | undefined,
    /** deltas[layer][module index in LORA_MODULES], undefined where the adapter leaves that projection alone. */
    readonly deltas: (LoraDelta | undefined)[][],
    readonly bytes: number,
  ) {}

  /**
   * The same adapter with only layers [from, to) (a pipeline stage's): the others' deltas dropped, so a stage
   * holds its layers' part. Its identity stays the files': the head checks a stage read the same adapter.
   */
  forLayers(from: number, to: number): LoraAdapter {
    const deltas = this.deltas.map((layer, l) => (l >= from && l < to ? layer : layer.map(() => undefined)));
    const bytes = deltas.flat().reduce((n, d) => n + (d ? d.a.byteLength + d.b.byteLength : 0), 0);
    return new LoraAdapter(this.name, this.identity, this.scale, this.rank, this.baseModel, deltas, bytes);
  }

  /** The modules it changes (for listings and messages). */
  get modules(): LoraModule[] {
    return LORA_MODULES.filter((_m, i) => this.deltas.some((layer) => layer[i] !== undefined));
  }
}

/** A refusal naming the adapter's file and the reason: 404 (`model_not_found`) for a missing adapter, else 400. */
export function adapterError(
  name: string,
  file: string,
  reason: string,
  code = 'invalid_adapter',
): InvalidRequestError {
  return new InvalidRequestError('model', `adapter '${name}': adapters/${name}/${file} ${reason}`, code);
}

/** A name that is one folder under adapters/ (no path tricks). */
export function isAdapterName(name: string): boolean {
  return /^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/.test(name) && !name.includes('..');
}

/** Each projection's (in, out) on this base model. */
export function moduleShapes(config: ModelConfig): Record<LoraModule, { in: number; out: number } | undefined> {
  const H = config.hiddenSize;
  const Q = config.numHeads * config.headDim;
  const KV = config.numKvHeads * config.headDim;
  const I = config.intermediateSize;
  return {
    q_proj: { in: H, out: Q },
    k_proj: { in: H, out: KV },
    v_proj: { in: H, out: KV },
    o_proj: { in: Q, out: H },
    gate_proj: I === undefined ? undefined : { in: H, out: I },
    up_proj: I === undefined ? undefined : { in: H, out: I },
    down_proj: I === undefined ? undefined : { in: I, out: H },
  };
}

interface LoraConfig {
  rank: number;
  alpha: number;
  rslora: boolean;
  targets: Set<string> | 'all-linear';
  baseModel: string | undefined;
}

function readConfig(name: string, bytes: Uint8Array): LoraConfig {
  const bad = (reason: string): InvalidRequestError => adapterError(name, 'adapter_config.json', reason);
  let json: Record<string, unknown>;
  try {
    json = JSON.parse(new TextDecoder().decode(bytes)) as Record<string, unknown>;
  } catch {
    throw bad('is not JSON');
  }
  if (typeof json !== 'object' || json === null || Array.isArray(json)) throw bad('is not a JSON object');
  if (json.peft_type !== undefined && json.peft_type !== 'LORA')
    throw bad(`is a ${String(json.peft_type)} adapter; only LORA adapters are served`);
  const r = json.r;
  if (typeof r !== 'number' || !Number.isInteger(r) || r < 1)
    throw bad(`has no rank r (a positive integer), got ${JSON.stringify(r)}`);
  if (r > MAX_LORA_RANK) throw bad(`has rank r = ${r}, over the limit of ${MAX_LORA_RANK}`);
  const alpha = json.lora_alpha ?? r;
  if (typeof alpha !== 'number' || !Number.isFinite(alpha)) throw bad(`has a lora_alpha that is not a number`);
  if (json.use_dora === true) throw bad('uses DoRA (use_dora), which is not served');
  if (json.fan_in_fan_out === true)
    throw bad("sets fan_in_fan_out: its weights are GPT-2's Conv1D layout, another architecture");
  for (const key of ['rank_pattern', 'alpha_pattern'])
    if (json[key] && typeof json[key] === 'object' && Object.keys(json[key] as object).length > 0)
      throw bad(`sets ${key}: per-module ranks are not served`);
  if (json.bias !== undefined && json.bias !== 'none')
    throw bad(`trains biases (bias: ${JSON.stringify(json.bias)}), which are not served`);
  const targets = json.target_modules;
  let set: LoraConfig['targets'];
  if (targets === 'all-linear') set = 'all-linear';
  else if (Array.isArray(targets) && targets.every((t) => typeof t === 'string')) set = new Set(targets as string[]);
  else throw bad('has no target_modules (a list of module names)');
  if (set !== 'all-linear') {
    for (const t of set) {
      if ((LORA_MODULES as readonly string[]).includes(t)) continue;
      if (FOREIGN_MODULES.includes(t))
        throw bad(`targets ${t}, a module of another architecture; this base model's are ${LORA_MODULES.join(', ')}`);
      throw bad(`targets ${t}, an unknown module; LoRA is served on ${LORA_MODULES.join(', ')}`);
    }
  }
  const base = typeof json.base_model_name_or_path === 'string' ? json.base_model_name_or_path : undefined;
  return { rank: r, alpha, rslora: json.use_rslora === true, targets: set, baseModel: base };
}

const KEY = /^base_model\.model\.model\.layers\.(\d+)\.(self_attn|mlp)\.([A-Za-z_]+)\.lora_([AB])\.weight$/;

/**
 * Reads and checks adapter `name` from `source` (the base model's folder: its `adapters/<name>/`). Refusals
 * (InvalidRequestError, param `model`) name the file and the reason: a missing folder is `model_not_found`
 * (404), anything else `invalid_adapter` (400).
 */
export async function loadLoraAdapter(source: ModelSource, name: string, config: ModelConfig): Promise<LoraAdapter> {
  if (!isAdapterName(name))
    throw new InvalidRequestError(
      'model',
      `'${name}' is not an adapter name (letters, digits, . _ -)`,
      'model_not_found',
    );
  const configBytes = await source.read(`adapters/${name}/adapter_config.json`);
  if (!configBytes)
    throw adapterError(name, 'adapter_config.json', 'does not exist: no such model or adapter', 'model_not_found');
  const lora = readConfig(name, configBytes);
  const file = 'adapter_model.safetensors';
  const weightBytes = await source.read(`adapters/${name}/${file}`);
  if (!weightBytes)
    throw adapterError(name, file, 'does not exist (an adapter is adapter_config.json and adapter_model.safetensors)');
  let tensors: Map<string, SafeTensor>;
  try {
    tensors = readSafetensors(weightBytes);
  } catch (err) {
    throw adapterError(name, file, `cannot be read: ${(err as Error).message}`);
  }
  const bad = (reason: string): InvalidRequestError => adapterError(name, file, reason);
  const shapes = moduleShapes(config);
  const deltas: (LoraDelta | undefined)[][] = Array.from({ length: config.numLayers }, () =>
    LORA_MODULES.map(() => undefined),
  );
  const halves = new Map<string, { a?: SafeTensor; b?: SafeTensor; layer: number; module: LoraModule }>();
  for (const [key, tensor] of tensors) {
    const m = KEY.exec(key);
    if (!m) {
      if (key.includes('lora_magnitude_vector')) throw bad(`holds ${key}: a DoRA adapter, which is not served`);
      throw bad(
        `holds ${key}, not a LoRA weight of a Llama-family layer (base_model.model.model.layers.N.self_attn|mlp.<module>.lora_A|B.weight)`,
      );
    }
    const [, layerText, , module, half] = m;
    const layer = Number(layerText);
    if (FOREIGN_MODULES.includes(module))
      throw bad(
        `holds ${key}: ${module} is a module of another architecture; this base model's are ${LORA_MODULES.join(', ')}`,
      );
    if (!(LORA_MODULES as readonly string[]).includes(module))
      throw bad(`holds ${key}: ${module} is an unknown module`);
    if (layer >= config.numLayers)
      throw bad(
        `holds ${key}: layer ${layer}, but the base model has ${config.numLayers} layers (an adapter for another model)`,
      );
    const entry = halves.get(`${layer}.${module}`) ?? { layer, module: module as LoraModule };
    entry[half === 'A' ? 'a' : 'b'] = tensor;
    halves.set(`${layer}.${module}`, entry);
  }
  if (halves.size === 0) throw bad('holds no LoRA weights');
  let bytes = 0;
  for (const [where, { a, b, layer, module }] of halves) {
    if (!a || !b) throw bad(`has lora_${a ? 'B' : 'A'} but not lora_${a ? 'A' : 'B'} for layer ${where}`);
    if (lora.targets !== 'all-linear' && !lora.targets.has(module))
      throw bad(`holds weights for ${module}, which adapter_config.json's target_modules does not name`);
    const shape = shapes[module];
    if (!shape) throw bad(`changes ${module}, but the base model's config.json gives no intermediate_size`);
    const r = lora.rank;
    const want = { a: [r, shape.in], b: [shape.out, r] };
    for (const [which, t] of [
      ['A', a],
      ['B', b],
    ] as const) {
      const expected = which === 'A' ? want.a : want.b;
      if (t.dims.join(',') !== expected.join(','))
        throw bad(
          `holds layer ${layer} ${module}.lora_${which} of shape [${t.dims}]; the base model's ${module} (in ${shape.in}, out ${shape.out}) at rank ${r} needs [${expected}]`,
        );
    }
    deltas[layer][LORA_MODULES.indexOf(module)] = { rank: r, a: a.data, b: b.data, in: shape.in, out: shape.out };
    bytes += a.data.byteLength + b.data.byteLength;
  }
  const scale = lora.rslora ? lora.alpha / Math.sqrt(lora.rank) : lora.alpha / lora.rank;
  const both = new Uint8Array(configBytes.length + weightBytes.length);
  both.set(configBytes);
  both.set(weightBytes, configBytes.length);
  return new LoraAdapter(name, sha256Hex(both), scale, lora.rank, lora.baseModel, deltas, bytes);
}
