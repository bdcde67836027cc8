import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { importGguf } from '../../scripts/import/gguf.js';
import { DEFAULT_SEED } from '../../scripts/model-make.js';
import { presetGgufInput, writeLlamaGguf } from '../../scripts/model/gguf-writer.js';

/** tiny-256's weights as a Q4_K_M GGUF file, imported into `out` as `model:import gguf` writes it. */
export async function writeGgufFolder(out: string): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'edge-infer-gguf-'));
  try {
    const file = join(dir, 'tiny-256-Q4_K_M.gguf');
    writeLlamaGguf(file, presetGgufInput('tiny-256', DEFAULT_SEED), 'Q4_K_M');
    rmSync(out, { recursive: true, force: true });
    await importGguf(file, out);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
