// model:pull of an ONNX export (onnx-community's layout): config and tokenizer files, then the graphs
// asked for (--file, or onnx/model_<dtype>.onnx for --dtype; else the smallest the repo has), as they are.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { kvBytesPerToken, parseModelConfig } from '../../src/engine/model/config.js';
import { HubError } from './hub-client.js';
import type { PullResult, RepoPull } from './pull-types.js';

/** Files a model folder needs besides the graph; the optional ones are fetched when the repo has them. */
export const REQUIRED = ['config.json', 'tokenizer.json', 'tokenizer_config.json'];
export const OPTIONAL = ['generation_config.json', 'special_tokens_map.json'];
/** onnx-community's graph names: onnx/model.onnx, onnx/model_<dtype>.onnx. */
const GRAPH = /^onnx\/model(?:_([a-z0-9]+))?\.onnx$/;
/** Preferred graphs when neither --file nor --dtype is given: small enough for an edge isolate first. */
const DEFAULT_GRAPHS = ['onnx/model_q4.onnx', 'onnx/model_int8.onnx', 'onnx/model_fp16.onnx', 'onnx/model.onnx'];

export function dtypeOfGraph(file: string): string {
  const m = GRAPH.exec(file);
  if (!m)
    throw new HubError(
      `--file ${file}: the engine loads onnx/model.onnx or onnx/model_<dtype>.onnx (onnx-community's names)`,
    );
  return m[1] ?? 'fp32';
}

const graphOfDtype = (dtype: string): string => (dtype === 'fp32' ? 'onnx/model.onnx' : `onnx/model_${dtype}.onnx`);

export async function pullOnnx({ opts, revision, byName, result, fetch }: RepoPull): Promise<PullResult> {
  const asked = [...(opts.files ?? []), ...(opts.dtypes ?? []).map(graphOfDtype)];
  const graphs = asked.length ? [...new Set(asked)] : [DEFAULT_GRAPHS.find((f) => byName.has(f)) ?? 'onnx/model.onnx'];
  for (const g of graphs) {
    dtypeOfGraph(g);
    if (!byName.has(g)) {
      const have = [...byName.keys()].filter((f) => GRAPH.test(f));
      throw new HubError(
        `${opts.repo}@${revision} has no ${g}${have.length ? ` (it has ${have.join(', ')})` : ' and no onnx/model*.onnx graphs: it is not an ONNX export'}`,
      );
    }
    if ([...byName.keys()].some((f) => f.startsWith(`${g}_data`))) {
      throw new HubError(
        `${g} keeps its weights in external data files (${g}_data); the engine loads single-file graphs: pick a smaller variant with --file`,
      );
    }
  }
  for (const f of REQUIRED) if (!byName.has(f)) throw new HubError(`${opts.repo}@${revision} has no ${f}`);
  result.dtypes = graphs.map(dtypeOfGraph);
  // Small files first: an architecture the engine cannot serve is refused before the big download.
  for (const f of [...REQUIRED, ...OPTIONAL.filter((f) => byName.has(f))]) await fetch(f, opts.outDir);
  const config = parseModelConfig(JSON.parse(readFileSync(join(opts.outDir, 'config.json'), 'utf8')));
  result.kvBytesPerToken = kvBytesPerToken(config);
  for (const g of graphs) {
    await fetch(g, opts.outDir);
    result.weightBytes = Math.max(result.weightBytes, result.files.at(-1)!.bytes);
  }
  return result;
}
