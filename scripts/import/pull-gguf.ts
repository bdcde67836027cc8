// model:pull of a GGUF repo (llama.cpp's format; a repo usually holds one file per quantisation, e.g.
// SmolLM2-135M-Instruct-Q4_K_M.gguf, and no config or tokenizer). The chosen file is fetched into
// <out>/.download, verified, and imported as `model:import gguf` does: config.json, tokenizer files and the
// file itself as model.gguf, which the kernels read in place.
import { readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { importGguf } from './gguf.js';
import { HubError } from './hub-client.js';
import { DOWNLOAD_DIR } from './pull-safetensors.js';
import type { PullResult, RepoPull } from './pull-types.js';
import { kvBytesPerToken, parseModelConfig } from '../../src/engine/model/config.js';

/** Quantisations a pull prefers when --file does not pick one: small, and all read by the kernels. */
const PREFERRED = ['Q4_K_M', 'Q4_K_S', 'Q5_K_M', 'Q8_0', 'Q4_0', 'Q6_K', 'F16', 'BF16', 'F32'];

export async function pullGguf({ opts, revision, byName, result, fetch }: RepoPull): Promise<PullResult> {
  const where = `${opts.repo}@${revision}`;
  if (opts.dtypes?.length)
    throw new HubError(`--dtype converts safetensors; ${where} is GGUF: pick a file with --file`);
  const ggufs = [...byName.keys()].filter((f) => f.endsWith('.gguf')).sort();
  let file: string | undefined;
  if (opts.files?.length) {
    if (opts.files.length !== 1 || !ggufs.includes(opts.files[0]))
      throw new HubError(`--file: ${where} holds ${ggufs.join(', ')}; name one of them`);
    file = opts.files[0];
  } else {
    for (const q of PREFERRED) file ??= ggufs.find((f) => f.toUpperCase().includes(q));
    file ??= ggufs.length === 1 ? ggufs[0] : undefined;
    if (!file) throw new HubError(`${where} holds ${ggufs.join(', ')}: pick one with --file`);
  }
  const staging = join(opts.outDir, DOWNLOAD_DIR);
  await fetch(file, staging);
  opts.onStage?.(`importing ${file}`);
  try {
    result.written = await importGguf(join(staging, file), opts.outDir);
  } catch (e) {
    throw new HubError(`${where}: ${file}: ${e instanceof Error ? e.message : String(e)}`);
  }
  rmSync(staging, { recursive: true, force: true });
  const config = JSON.parse(readFileSync(join(opts.outDir, 'config.json'), 'utf8')) as Record<string, unknown>;
  result.kvBytesPerToken = kvBytesPerToken(parseModelConfig(config));
  result.dtypes = ['gguf'];
  result.weightBytes = result.written.find((f) => f.file.endsWith('.gguf'))?.bytes ?? 0;
  return result;
}
