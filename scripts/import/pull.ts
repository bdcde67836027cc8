// model:pull: which kind of repo it is, decided by the files it lists, and the puller for that kind.
//   onnx          onnx/model.onnx, onnx/model_<dtype>.onnx (onnx-community's layout)     -> pull-onnx.ts
//   safetensors   model.safetensors, or model.safetensors.index.json and its shards      -> pull-safetensors.ts
//   gguf          *.gguf (one quantisation picked)                                        -> pull-gguf.ts
// A repo holding several (HuggingFaceTB/SmolLM2-135M-Instruct has onnx/ and model.safetensors) is pulled
// as the first of that list unless --format picks another. Every puller fetches at the revision's commit
// and verifies every file (hub-client.ts).
import { destination, downloadFile, HubError, revisionInfo } from './hub-client.js';
import type { PullOptions, PullResult, Puller, RepoFormat } from './pull-types.js';
import { REPO_FORMATS } from './pull-types.js';
import { pullGguf } from './pull-gguf.js';
import { pullOnnx } from './pull-onnx.js';
import { pullSafetensors } from './pull-safetensors.js';

export type { PullOptions, PullResult, Puller, RepoFormat, RepoPull } from './pull-types.js';
export { REPO_FORMATS } from './pull-types.js';

/** The puller of each format. */
const PULLERS: Record<RepoFormat, Puller> = {
  onnx: pullOnnx,
  safetensors: pullSafetensors,
  gguf: pullGguf,
};

const IS_FORMAT: Record<RepoFormat, (file: string) => boolean> = {
  onnx: (f) => /^onnx\/model(?:_[a-z0-9]+)?\.onnx$/.test(f),
  safetensors: (f) => f === 'model.safetensors' || f === 'model.safetensors.index.json',
  gguf: (f) => f.endsWith('.gguf'),
};

/** The formats a repo's files hold, in the order a pull prefers them. */
export function formatsOf(files: readonly string[]): RepoFormat[] {
  return REPO_FORMATS.filter((format) => files.some(IS_FORMAT[format]));
}

export async function pullModel(opts: PullOptions): Promise<PullResult> {
  const revision = opts.revision ?? 'main';
  const info = await revisionInfo(opts.repo, revision, opts);
  const names = info.siblings.map((s) => s.rfilename);
  const formats = formatsOf(names);
  const where = `${opts.repo}@${revision}`;
  if (opts.format && !formats.includes(opts.format))
    throw new HubError(
      `${where} has no ${opts.format} files (it has ${formats.join(', ') || 'none the engine reads'})`,
    );
  // --file names what it picks: a .gguf picks the GGUF format, a graph the ONNX one.
  const picked = opts.files?.length ? (opts.files.every((f) => f.endsWith('.gguf')) ? 'gguf' : 'onnx') : undefined;
  const format = opts.format ?? picked ?? formats[0];
  if (!format) {
    const listed = names.slice(0, 12).join(', ') + (names.length > 12 ? ', ...' : '');
    throw new HubError(
      `${where} has nothing the engine can load: no onnx/model*.onnx, no model.safetensors (or its index), no .gguf (it has ${listed || 'no files'})`,
    );
  }
  const puller = PULLERS[format];
  const byName = new Map(info.siblings.map((s) => [s.rfilename, s]));
  const result: PullResult = {
    sha: info.sha,
    format,
    files: [],
    written: [],
    dtypes: [],
    weightBytes: 0,
    kvBytesPerToken: 0,
  };
  const fetch = async (file: string, dir: string): Promise<void> => {
    const s = byName.get(file);
    if (!s) throw new HubError(`${where} has no ${file}`);
    const status = await downloadFile(opts.repo, info.sha, s, destination(dir, file), opts);
    result.files.push({ file, bytes: s.lfs?.size ?? s.size ?? 0, status });
  };
  return puller({ opts, revision, sha: info.sha, byName, result, fetch });
}
