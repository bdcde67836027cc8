// An embedding model's GGUF declares its pooling in `<arch>.pooling_type` (llama.cpp's enum); `model:import gguf`
// writes it as sentence-transformers declares pooling (modules.json, 1_Pooling/config.json, Normalize), which is
// what the engine reads at load. A GGUF without the key (a chat model) declares nothing: the decoder default.
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { importGguf } from '../scripts/import/gguf.js';
import { DEFAULT_SEED } from '../scripts/model-make.js';
import { writeGguf } from '../scripts/model/gguf-file.js';
import { llamaGgufMeta, llamaTensors, presetGgufInput } from '../scripts/model/gguf-writer.js';
import { readPooling } from '../src/engine/embeddings/pooling.js';
import { directorySource } from '../src/sources/directory-source.js';

const root = mkdtempSync(join(tmpdir(), 'gguf-pooling-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));

/** tiny-qwen3 as a Q8_0 GGUF with `qwen3.pooling_type` = `type` (none: the key left out), imported. */
async function imported(type: number | undefined): Promise<string> {
  const input = presetGgufInput('tiny-qwen3', DEFAULT_SEED);
  const meta = llamaGgufMeta(input, 'Q8_0');
  if (type !== undefined) meta.push(['qwen3.pooling_type', { type: 'u32', value: type }]);
  const file = join(root, `pooling-${type}.gguf`);
  writeGguf(file, meta, llamaTensors(input.shape, input.weights, 'Q8_0'));
  const out = join(root, `folder-${type}`);
  await importGguf(file, out);
  return out;
}

describe("a GGUF's pooling_type", () => {
  it('mean, cls and last become the sentence-transformers declaration, normalised', async () => {
    for (const [type, mode] of [
      [1, 'mean'],
      [2, 'cls'],
      [3, 'last'],
    ] as const) {
      const folder = await imported(type);
      expect(await readPooling(directorySource(folder))).toEqual({ mode, normalize: true, declaredBy: 'modules.json' });
    }
  });

  it('none, rank or no key at all declare nothing', async () => {
    for (const type of [undefined, 0, 4]) {
      const folder = await imported(type);
      expect(existsSync(join(folder, 'modules.json'))).toBe(false);
      expect((await readPooling(directorySource(folder))).declaredBy).toBe('default');
    }
  });
});
