import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { importGguf } from '../../scripts/import/gguf.js';
import { DEFAULT_SEED } from '../../scripts/model-make.js';
import { presetGgufInput, writeLlamaGguf, type GgufFileType } from '../../scripts/model/gguf-writer.js';
import type { PresetName } from '../../scripts/model/presets.js';

/** A preset's weights (tiny-256's by default) as a GGUF file of `type`, imported into `out` as `model:import gguf` writes it. */
export async function writeGgufFolder(
  out: string,
  preset: PresetName = 'tiny-256',
  type: GgufFileType = 'Q4_K_M',
): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'edge-infer-gguf-'));
  try {
    const file = join(dir, `${preset}-${type}.gguf`);
    writeLlamaGguf(file, presetGgufInput(preset, DEFAULT_SEED), type);
    rmSync(out, { recursive: true, force: true });
    await importGguf(file, out);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
