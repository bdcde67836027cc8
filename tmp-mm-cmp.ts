import * as ort from 'onnxruntime-node';
import * as ortWeb from 'onnxruntime-web';
import { readFileSync } from 'node:fs';
ortWeb.env.wasm.numThreads = 1;
const dir = process.argv[2];
const cfg = JSON.parse(readFileSync(`${dir}/config.json`, 'utf8'));
const L = cfg.num_hidden_layers, KV = cfg.num_key_value_heads, HD = cfg.head_dim, V = cfg.vocab_size;
async function prefill(rt: any, f: string, ids: number[]) {
  const s = await rt.InferenceSession.create(readFileSync(`${dir}/onnx/${f}`));
  const feeds: any = {
    input_ids: new rt.Tensor('int64', BigInt64Array.from(ids, BigInt), [1, ids.length]),
    attention_mask: new rt.Tensor('int64', new BigInt64Array(ids.length).fill(1n), [1, ids.length]),
    position_ids: new rt.Tensor('int64', BigInt64Array.from(ids, (_, i) => BigInt(i)), [1, ids.length]),
  };
  for (let i = 0; i < L; i++) for (const kv of ['key', 'value']) feeds[`past_key_values.${i}.${kv}`] = new rt.Tensor('float32', new Float32Array(0), [1, KV, 0, HD]);
  return (await s.run(feeds)).logits.data as Float32Array;
}
const ids = Array.from({ length: 24 }, (_, i) => 3 + ((i * 7919 + 13) % (V - 3)));
const pairs = process.argv.slice(3);
for (const [name, rt] of [['node', ort], ['web', ortWeb]] as const) for (let i = 0; i < pairs.length; i += 2) {
  const a = await prefill(rt, pairs[i], ids), b = await prefill(rt, pairs[i + 1], ids);
  let md = 0, se = 0, sr = 0; for (let k = 0; k < a.length; k++) { md = Math.max(md, Math.abs(a[k] - b[k])); se += (a[k] - b[k]) ** 2; sr += b[k] ** 2; }
  console.log(name, pairs[i], 'vs', pairs[i + 1], 'max', md.toExponential(2), 'relrms', Math.sqrt(se / sr).toExponential(2));
}
