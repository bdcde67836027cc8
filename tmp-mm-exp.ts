import * as ort from 'onnxruntime-node';
import * as ortWeb from 'onnxruntime-web';
import { readFileSync } from 'node:fs';
ortWeb.env.wasm.numThreads = 1;
const dir = process.argv[2];
const cfg = JSON.parse(readFileSync(`${dir}/config.json`, 'utf8'));
const L = cfg.num_hidden_layers, KV = cfg.num_key_value_heads, HD = cfg.head_dim, V = cfg.vocab_size;
type R = typeof ort;
async function run(rt: any, file: string, prompts: number[][], steps: number) {
  const s = await rt.InferenceSession.create(readFileSync(`${dir}/onnx/${file}`));
  const out: { toks: number[]; gaps: number[]; logits: Float32Array[] }[] = [];
  for (const prompt of prompts) {
    let past: Record<string, any> = {};
    for (let i = 0; i < L; i++) for (const kv of ['key', 'value']) past[`past_key_values.${i}.${kv}`] = new rt.Tensor('float32', new Float32Array(0), [1, KV, 0, HD]);
    let ids = prompt; let pastLen = 0; const toks: number[] = []; const gaps: number[] = []; const logitsL: Float32Array[] = [];
    for (let step = 0; step <= steps; step++) {
      const T = pastLen + ids.length;
      const feeds: Record<string, any> = {
        input_ids: new rt.Tensor('int64', BigInt64Array.from(ids, BigInt), [1, ids.length]),
        attention_mask: new rt.Tensor('int64', new BigInt64Array(T).fill(1n), [1, T]),
        position_ids: new rt.Tensor('int64', BigInt64Array.from(ids, (_, i) => BigInt(pastLen + i)), [1, ids.length]),
        ...past,
      };
      const r = await s.run(feeds);
      const lg = r.logits.data as Float32Array;
      const last = lg.slice((ids.length - 1) * V, ids.length * V);
      logitsL.push(last);
      let a = -Infinity, b = -Infinity, ai = -1;
      for (let v = 0; v < V; v++) { const x = last[v]; if (x > a) { b = a; a = x; ai = v; } else if (x > b) b = x; }
      toks.push(ai); gaps.push(a - b);
      past = {};
      for (let i = 0; i < L; i++) for (const kv of ['key', 'value']) past[`past_key_values.${i}.${kv}`] = r[`present.${i}.${kv}`];
      pastLen = T; ids = [ai];
    }
    out.push({ toks, gaps, logits: logitsL });
  }
  return out;
}
let seed = 7;
const rnd = () => { seed = (seed * 1103515245 + 12345) >>> 0; return seed; };
const prompts = [0, 1, 2].map(() => Array.from({ length: 8 }, () => 3 + (rnd() % (V - 3))));
const ref = await run(ort, 'model.onnx', prompts, 32);
for (const r of ref) {
  const g = [...r.gaps].sort((x, y) => x - y);
  console.log('toks', r.toks.join(' '), '\n min gap', g[0].toFixed(4), 'median', g[g.length >> 1].toFixed(4), 'distinct', new Set(r.toks).size);
}
const std = (a: Float32Array) => { let m = 0; for (const x of a) m += x; m /= a.length; let v = 0; for (const x of a) v += (x - m) ** 2; return Math.sqrt(v / a.length); };
if (process.env.QUICK) { const runs = ref.map(r => { let m = 1, c = 1; for (let i = 1; i < r.toks.length; i++) { c = r.toks[i] === r.toks[i-1] ? c + 1 : 1; m = Math.max(m, c); } return m; }); console.log('maxrun', runs.join(','), 'mingap', Math.min(...ref.flatMap(r => r.gaps)).toFixed(4)); process.exit(0); }
console.log('logit std', std(ref[0].logits[0]).toFixed(2));
for (const [name, rt] of [['node', ort], ['web', ortWeb]] as const) for (const f of ['model.onnx', 'model_fp16.onnx', 'model_int8.onnx', 'model_q4.onnx']) {
  try {
    const o = await run(rt, f, prompts, 32);
    let md = 0, same = 0, n = 0;
    for (let p = 0; p < prompts.length; p++) { for (let k = 0; k < o[p].toks.length; k++) { n++; if (o[p].toks[k] === ref[p].toks[k]) same++; else break; }
      const a = o[p].logits[0], b = ref[p].logits[0]; for (let v = 0; v < V; v++) md = Math.max(md, Math.abs(a[v] - b[v])); }
    console.log(name, f, 'prefill maxdiff', md.toExponential(2), 'greedy prefix agree', same, '/', n);
  } catch (e) { console.log(name, f, 'ERR', String(e).slice(0, 300)); }
}
