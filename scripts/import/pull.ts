// model:pull: which files of a hub repo make a model folder, and fetching them.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { kvBytesPerToken, parseModelConfig } from '../../src/engine/model/config.js';
import { destination, downloadFile, HubError, revisionInfo, type HubOptions, type Sibling } from './hub-client.js';

/** Files a model folder needs besides the graph; the optional ones are fetched when the repo has them. */
const REQUIRED = ['config.json', 'tokenizer.json', 'tokenizer_config.json'];
const OPTIONAL = ['generation_config.json', 'special_tokens_map.json'];
/** onnx-community's graph names: onnx/model.onnx, onnx/model_<dtype>.onnx. */
const GRAPH = /^onnx\/model(?:_([a-z0-9]+))?\.onnx$/;
/** Preferred graphs when --file is not given: small enough for an edge isolate first. */
const DEFAULT_GRAPHS = ['onnx/model_q4.onnx', 'onnx/model_int8.onnx', 'onnx/model_fp16.onnx', 'onnx/model.onnx'];

export interface PullOptions extends HubOptions {
  repo: string;
  revision?: string;
  files?: string[];
  outDir: string;
}

export interface PullResult {
  sha: string;
  files: { file: string; bytes: number; status: 'downloaded' | 'present' }[];
  /** MODEL_DTYPE of each graph pulled (model_q4.onnx -> q4, model.onnx -> fp32). */
  dtypes: string[];
  weightBytes: number;
  kvBytesPerToken: number;
}

export function dtypeOfGraph(file: string): string {
  const m = GRAPH.exec(file);
  if (!m)
    throw new HubError(
      `--file ${file}: the engine loads onnx/model.onnx or onnx/model_<dtype>.onnx (onnx-community's names)`,
    );
  return m[1] ?? 'fp32';
}

export async function pullModel(opts: PullOptions): Promise<PullResult> {
  const revision = opts.revision ?? 'main';
  const info = await revisionInfo(opts.repo, revision, opts);
  const byName = new Map<string, Sibling>(info.siblings.map((s) => [s.rfilename, s]));
  const graphs = opts.files?.length ? opts.files : [DEFAULT_GRAPHS.find((f) => byName.has(f)) ?? 'onnx/model.onnx'];
  for (const g of graphs) {
    dtypeOfGraph(g);
    if (!byName.has(g)) {
      const have = info.siblings.map((s) => s.rfilename).filter((f) => GRAPH.test(f));
      throw new HubError(
        `${opts.repo}@${revision} has no ${g}${have.length ? ` (it has ${have.join(', ')})` : ' and no onnx/model*.onnx graphs: it is not an ONNX export'}`,
      );
    }
    if (info.siblings.some((s) => s.rfilename.startsWith(`${g}_data`))) {
      throw new HubError(
        `${g} keeps its weights in external data files (${g}_data); the engine loads single-file graphs: pick a smaller variant with --file`,
      );
    }
  }
  for (const f of REQUIRED) if (!byName.has(f)) throw new HubError(`${opts.repo}@${revision} has no ${f}`);
  const result: PullResult = {
    sha: info.sha,
    files: [],
    dtypes: graphs.map(dtypeOfGraph),
    weightBytes: 0,
    kvBytesPerToken: 0,
  };
  const fetchOne = async (name: string) => {
    const s = byName.get(name)!;
    const status = await downloadFile(opts.repo, info.sha, s, destination(opts.outDir, name), opts);
    result.files.push({ file: name, bytes: s.lfs?.size ?? s.size ?? 0, status });
  };
  // Small files first: an architecture the engine cannot serve is refused before the big download.
  for (const f of [...REQUIRED, ...OPTIONAL.filter((f) => byName.has(f))]) await fetchOne(f);
  const config = parseModelConfig(JSON.parse(readFileSync(join(opts.outDir, 'config.json'), 'utf8')));
  result.kvBytesPerToken = kvBytesPerToken(config);
  for (const g of graphs) {
    await fetchOne(g);
    result.weightBytes = Math.max(result.weightBytes, result.files.at(-1)!.bytes);
  }
  return result;
}
