import * as ort from 'onnxruntime-web'; ort.env.wasm.numThreads = 1;
import { readFileSync } from 'node:fs';
const dir = process.argv[2];
const cfg = JSON.parse(readFileSync(`${dir}/config.json`, 'utf8'));
const L = cfg.num_hidden_layers, KV = cfg.num_key_value_heads, HD = cfg.head_dim, V = cfg.vocab_size;
for (const f of process.argv.slice(3)) {
  const t0 = performance.now();
  const s = await ort.InferenceSession.create(readFileSync(`${dir}/onnx/${f}`));
  const tLoad = performance.now() - t0;
  let past: Record<string, any> = {};
  for (let i = 0; i < L; i++) for (const kv of ['key', 'value']) past[`past_key_values.${i}.${kv}`] = new ort.Tensor('float32', new Float32Array(0), [1, KV, 0, HD]);
  let ids = [5, 900, 17, 4000, 123, 77, 31000, 9]; let pastLen = 0; const toks: number[] = []; const gaps: number[] = [];
  let tDec = 0; const steps = 6;
  for (let step = 0; step <= steps; step++) {
    const T = pastLen + ids.length;
    const t1 = performance.now();
    const r = await s.run({
      input_ids: new ort.Tensor('int64', BigInt64Array.from(ids, BigInt), [1, ids.length]),
      attention_mask: new ort.Tensor('int64', new BigInt64Array(T).fill(1n), [1, T]),
      position_ids: new ort.Tensor('int64', BigInt64Array.from(ids, (_, i) => BigInt(pastLen + i)), [1, ids.length]),
      ...past,
    });
    if (step > 0) tDec += performance.now() - t1;
    const lg = r.logits.data as Float32Array; const last = lg.subarray((ids.length - 1) * V, ids.length * V);
    let a = -Infinity, b = -Infinity, ai = -1;
    for (let v = 0; v < V; v++) { const x = last[v]; if (x > a) { b = a; a = x; ai = v; } else if (x > b) b = x; }
    toks.push(ai); gaps.push(a - b);
    past = {}; for (let i = 0; i < L; i++) for (const kv of ['key', 'value']) past[`past_key_values.${i}.${kv}`] = r[`present.${i}.${kv}`];
    pastLen = T; ids = [ai];
  }
  console.log(f, 'load', tLoad.toFixed(0), 'ms; decode', (steps / (tDec / 1000)).toFixed(1), 'tok/s; toks', toks.join(' '), '; min gap', Math.min(...gaps).toFixed(3));
}
