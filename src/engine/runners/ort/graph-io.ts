import { InvalidRequestError } from '../../errors.js';
import type { ModelConfig } from '../../model/config.js';
import { fromHalf, toHalf } from '../../model/half.js';
import type { EngineRuntime, OrtSession, OrtTensor } from '../../model/runtime.js';

/** Float element types a graph may use for its KV cache and logits. */
export type FloatType = 'float32' | 'float16';

/**
 * What the runner must feed a loaded graph and how to read what it returns, from the session's own
 * input/output metadata. Our generated graphs and Hugging Face (optimum / onnx-community) exports share
 * the names (`input_ids`, `attention_mask`, `position_ids`, `past_key_values.{i}.key|value` ->
 * `logits`, `present.{i}.key|value`) but not the types: fp16 exports take and return fp16 KV and
 * logits. The engine's block pool stays float32; fp16 tensors are converted at the boundary.
 */
export interface GraphIo {
  kvType: FloatType;
  logitsType: FloatType;
  /** Some exports compute positions from the attention mask and take no position_ids. */
  hasPositionIds: boolean;
  /** past KV (float32, as gathered from the pool) -> the tensor the graph takes. */
  kvTensor(data: Float32Array, dims: readonly number[]): OrtTensor;
  /** A present / logits output as float32 (a view when it already is). */
  floats(tensor: OrtTensor): Float32Array;
}

const FLOAT_TYPES: readonly string[] = ['float32', 'float16'];

/** Reads the session's inputs and outputs; refuses, naming it, anything the runner cannot feed or read. */
export function describeGraphIo(runtime: EngineRuntime, session: OrtSession, config: ModelConfig): GraphIo {
  const refuse = (message: string): never => {
    throw new InvalidRequestError('model', `the model's ONNX graph cannot be served: ${message}`, 'unsupported_model');
  };
  const types = new Map<string, string>();
  for (const m of [...session.inputMetadata, ...session.outputMetadata])
    types.set(m.name, m.isTensor ? m.type : 'non-tensor');
  const inputs = new Set(session.inputNames);
  const outputs = new Set(session.outputNames);
  const known = new Set(['input_ids', 'attention_mask', 'position_ids']);
  for (let i = 0; i < config.numLayers; i++) known.add(`past_key_values.${i}.key`).add(`past_key_values.${i}.value`);
  for (const name of inputs)
    if (!known.has(name))
      refuse(
        `input ${name} is not one the engine feeds (input_ids, attention_mask, position_ids, past_key_values.{0..${config.numLayers - 1}}.key|value)`,
      );
  for (const name of ['input_ids', 'attention_mask']) if (!inputs.has(name)) refuse(`it has no ${name} input`);
  for (let i = 0; i < config.numLayers; i++) {
    for (const kind of ['key', 'value']) {
      if (!inputs.has(`past_key_values.${i}.${kind}`))
        refuse(
          `it has no past_key_values.${i}.${kind} input (num_hidden_layers is ${config.numLayers} in config.json; exports without a KV cache cannot be served)`,
        );
      if (!outputs.has(`present.${i}.${kind}`)) refuse(`it has no present.${i}.${kind} output`);
    }
  }
  if (!outputs.has('logits')) refuse('it has no logits output');
  const kvType = types.get('past_key_values.0.key') ?? 'float32';
  const logitsType = types.get('logits') ?? 'float32';
  if (!FLOAT_TYPES.includes(kvType)) refuse(`its KV cache is ${kvType}; float32 and float16 are supported`);
  if (!FLOAT_TYPES.includes(logitsType)) refuse(`its logits are ${logitsType}; float32 and float16 are supported`);
  const Tensor = runtime.Tensor;
  return {
    kvType: kvType as FloatType,
    logitsType: logitsType as FloatType,
    hasPositionIds: inputs.has('position_ids'),
    kvTensor:
      kvType === 'float16'
        ? (data, dims) => new Tensor('float16', toHalf(data), dims)
        : (data, dims) => new Tensor('float32', data, dims),
    floats: (tensor) => {
      if (tensor.type === 'float32') return tensor.data as Float32Array;
      if (tensor.type === 'float16') return fromHalf(tensor.data as Uint16Array);
      throw new Error(`expected a float tensor, got ${tensor.type}`);
    },
  };
}
