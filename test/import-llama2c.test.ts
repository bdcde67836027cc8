// model:import llama2c: checkpoints and tokenizer.bin files written here in run.c's formats (random weights,
// small dims, GQA and MHA, shared and unshared classifier) are imported, served by the engine, and checked
// against the reference forward pass run with run.c's own conventions (test/reference/llama2c-weights.ts)
// and against a port of run.c's encode().
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseImportArgs, runImport } from '../scripts/model-import.js';
import { PRESETS, type LlamaShape } from '../scripts/model/presets.js';
import { nodeRuntime } from '../scripts/lib/runtimes.js';
import { Engine } from '../src/engine/engine.js';
import { directorySource } from '../src/sources/directory-source.js';
import { IncrementalDetokenizer } from '../src/tokenizer/incremental-detokenizer.js';
import { TextTokenizer } from '../src/tokenizer/tokenizer.js';
import { argmax, collect, maxAbsDiff, topGap } from './helpers/engines.js';
import {
  runcEncode,
  trainVocab,
  writeCheckpoint,
  writeTokenizerBin,
  type Llama2cTestVocab,
} from './helpers/llama2c.js';
import { loadLlama2cReference } from './reference/llama2c-weights.js';
import type { LlamaReference } from './reference/llama-reference.js';
import { llama2cTokenizerFiles } from '../scripts/import/llama2c-tokenizer.js';

const ROOT = join(import.meta.dirname, '..');
const SEQ = 256;
const STEPS = 24;
let dir: string;
let vocab: Llama2cTestVocab;

beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'llama2c-'));
  vocab = trainVocab(readFileSync(join(ROOT, 'scripts/tokenizer/corpus.txt'), 'utf8'), 400);
  writeTokenizerBin(join(dir, 'tokenizer.bin'), vocab);
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const TEXTS = [
  'Once upon a time, there was a little girl named Lily.',
  'Hello world',
  ' leading space and  double  spaces',
  'Quiz: Zebras eat €5 of Qat?', // Q, Z and € are not in the vocabulary: byte fallback
  'naïve café — 東京 🙂 Ünïcödé',
  'line one\nline two\ttab',
  'aaaaaaaaa bbbb ababab the the the',
];

describe('llama2.c tokenizer -> tokenizer.json', () => {
  let tok: TextTokenizer;
  let config: Record<string, unknown>;
  beforeAll(() => {
    const out = join(dir, 'tok-model');
    const shape: LlamaShape = { ...PRESETS.tiny, vocabSize: vocab.pieces.length };
    writeCheckpoint(join(dir, 'tok.bin'), shape, SEQ, 1);
    runImport(parseImportArgs(['llama2c', join(dir, 'tok.bin'), join(dir, 'tokenizer.bin'), '--out', out]));
    config = JSON.parse(readFileSync(join(out, 'tokenizer_config.json'), 'utf8'));
    tok = TextTokenizer.fromJson(JSON.parse(readFileSync(join(out, 'tokenizer.json'), 'utf8')), config);
  });

  it("encodes as run.c's encode (BPE by score, dummy prefix, byte fallback)", () => {
    const corpusLines = readFileSync(join(ROOT, 'scripts/tokenizer/corpus.txt'), 'utf8')
      .split('\n')
      .filter((l) => l.trim());
    let byteFallbacks = 0;
    for (const text of [...TEXTS, ...corpusLines]) {
      const expected = runcEncode(vocab, text, false);
      byteFallbacks += expected.filter((id) => id >= 3 && id < 259).length;
      expect(tok.encode(text), JSON.stringify(text)).toEqual(expected);
    }
    expect(byteFallbacks, 'the texts exercise byte fallback').toBeGreaterThan(10);
  });

  it('pieces named like Object.prototype members ("constructor", "toString") are ordinary tokens', () => {
    const names = ['constructor', 'toString', '__proto__', 'hasOwnProperty'];
    const files = llama2cTokenizerFiles({
      maxTokenLength: 16,
      pieces: [...vocab.pieces, ...names],
      scores: Float32Array.from([...vocab.scores, -1, -2, -3, -4]),
    });
    const model = (files.tokenizerJson as { model: { vocab: Record<string, number> } }).model;
    for (const [i, name] of names.entries())
      expect(Object.getOwnPropertyDescriptor(model.vocab, name)?.value).toBe(vocab.pieces.length + i);
  });

  it('chat prompts start with BOS as run.c does; decoding gives the text back, streamed or not', () => {
    expect(config.bos_token).toBe('<s>');
    for (const text of TEXTS) {
      const ids = runcEncode(vocab, text, true);
      expect(tok.encode(`<s>${text}`)).toEqual(ids);
      // A raw completion prompt gets the BOS from the tokenizer's post-processor, as run.c's prompt does.
      expect(tok.encodePrompt(text)).toEqual(ids);
      expect(tok.decode(ids, { skipSpecialTokens: true })).toBe(text);
      // Streaming: the pieces concatenate to the text plus run.c's dummy-prefix space.
      const detok = new IncrementalDetokenizer(tok);
      const streamed = ids.map((id) => detok.push(id)).join('') + detok.flush();
      expect(streamed).toBe(` ${text}`);
    }
  });
});

interface Case {
  name: string;
  shape: LlamaShape;
}

const CASES: Case[] = [
  { name: 'GQA, shared classifier', shape: { ...PRESETS.tiny, maxPositionEmbeddings: SEQ } },
  {
    name: 'MHA, unshared classifier',
    shape: { ...PRESETS.tiny, numKvHeads: 4, tieWordEmbeddings: false, maxPositionEmbeddings: SEQ },
  },
];

for (const [i, c] of CASES.entries()) {
  describe(`llama2.c checkpoint (${c.name}) -> engine`, () => {
    let ref: LlamaReference;
    let out: string;
    const prompt = () => runcEncode(vocab, 'Once upon a time, there was', true);
    beforeAll(async () => {
      const shape = { ...c.shape, vocabSize: vocab.pieces.length };
      const bin = join(dir, `model${i}.bin`);
      writeCheckpoint(bin, shape, SEQ, 7 + i);
      out = join(dir, `model${i}`);
      runImport(parseImportArgs(['llama2c', bin, join(dir, 'tokenizer.bin'), '--out', out]));
      ref = await loadLlama2cReference(bin);
    });

    // Every case on the edge kernels too (GQA, shared and unshared classifiers); onnxruntime-web on the first.
    for (const backend of i === 0 ? (['cpu', 'kernels', 'ort-wasm'] as const) : (['cpu', 'kernels'] as const)) {
      it(`${backend}: logits match run.c's math within 1e-4 over ${STEPS} teacher-forced steps; greedy tokens equal`, async () => {
        const engine = await Engine.load(await nodeRuntime(backend), directorySource(out), { kvCacheBytes: 4 << 20 });
        try {
          const kv = engine.kv.create();
          let feed = prompt();
          let refLogits = ref.forward(feed, 0).at(-1)!;
          let pos = feed.length;
          let worst = 0;
          let minGap = Infinity;
          for (let step = 0; step < STEPS; step++) {
            expect(engine.kv.reserve(kv, feed.length)).toBe(true);
            const logits = (await engine.runner.forward([{ kv, tokens: feed }])).last(0);
            worst = Math.max(worst, maxAbsDiff(logits, refLogits));
            minGap = Math.min(minGap, topGap(refLogits));
            expect(argmax(logits)).toBe(argmax(refLogits));
            feed = [argmax(refLogits)];
            refLogits = ref.forward(feed, pos++)[0];
          }
          engine.kv.free(kv);
          expect(worst).toBeLessThan(1e-4);
          expect(minGap, 'greedy decisions are not near-ties').toBeGreaterThan(1e-3);

          const expected = ref.greedy(prompt(), STEPS);
          const { done } = await collect(engine, {
            prompt_ids: prompt(),
            max_tokens: STEPS,
            temperature: 0,
            ignore_eos: true,
          });
          expect(done.tokenIds).toEqual(expected);
          expect(new Set(expected).size).toBeGreaterThan(1);
          // A chat message is BOS + the text, as run.c feeds its prompt.
          const chat = await collect(engine, {
            messages: [{ role: 'user', content: 'Once upon a time, there was' }],
            max_tokens: 4,
            temperature: 0,
            ignore_eos: true,
          });
          expect(chat.done.promptIds).toEqual(prompt());
        } finally {
          await engine.runner.release();
        }
      });
    }
  });
}

describe('model:import llama2c: the command and bad input', () => {
  it('runs as a command and writes the requested dtypes', () => {
    const shape = { ...PRESETS.tiny, vocabSize: vocab.pieces.length };
    writeCheckpoint(join(dir, 'cli.bin'), shape, SEQ, 3);
    const out = join(dir, 'cli-model');
    execFileSync(
      process.execPath,
      [
        '--import',
        'tsx',
        join(ROOT, 'scripts/model-import.ts'),
        'llama2c',
        join(dir, 'cli.bin'),
        join(dir, 'tokenizer.bin'),
        '--out',
        out,
        '--dtype',
        'fp32,q4',
      ],
      { cwd: ROOT, stdio: 'pipe' },
    );
    const config = JSON.parse(readFileSync(join(out, 'config.json'), 'utf8'));
    expect(config).toMatchObject({
      model_type: 'llama',
      hidden_size: 64,
      num_key_value_heads: 2,
      vocab_size: vocab.pieces.length,
      max_position_embeddings: SEQ,
    });
    expect(readFileSync(join(out, 'onnx/model_q4.onnx')).byteLength).toBeLessThan(
      readFileSync(join(out, 'onnx/model.onnx')).byteLength,
    );
  });

  it('refuses a truncated checkpoint, a tokenizer of another vocabulary size, and bad arguments', () => {
    const shape = { ...PRESETS.tiny, vocabSize: vocab.pieces.length };
    writeCheckpoint(join(dir, 'cut.bin'), shape, SEQ, 3);
    const full = readFileSync(join(dir, 'cut.bin'));
    writeFileSync(join(dir, 'cut.bin'), full.subarray(0, full.byteLength - 100));
    const out = join(dir, 'never');
    expect(() =>
      runImport(parseImportArgs(['llama2c', join(dir, 'cut.bin'), join(dir, 'tokenizer.bin'), '--out', out])),
    ).toThrow(/header implies \d+ bytes, file has/);
    writeCheckpoint(join(dir, 'other.bin'), { ...shape, vocabSize: vocab.pieces.length - 5 }, SEQ, 3);
    expect(() =>
      runImport(parseImportArgs(['llama2c', join(dir, 'other.bin'), join(dir, 'tokenizer.bin'), '--out', out])),
    ).toThrow(/vocab_size does not match/);
    writeFileSync(join(dir, 'v1.bin'), Buffer.from(Int32Array.of(0x616b3432, 1, 64, 176, 2, 4, 2, 512, 256).buffer));
    expect(() =>
      runImport(parseImportArgs(['llama2c', join(dir, 'v1.bin'), join(dir, 'tokenizer.bin'), '--out', out])),
    ).toThrow(/version 1\/2 format .*re-export with --version 0/);
    expect(() => parseImportArgs(['llama2c', 'a.bin', '--out', out])).toThrow(/^Usage: /);
    expect(() => parseImportArgs(['llama2c', 'a.bin', 'b.bin', '--out', out, '--dtype', 'int3'])).toThrow(
      /--dtype: int3/,
    );
  });
});
