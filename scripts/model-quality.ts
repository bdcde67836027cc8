// `npm run model:quality`: what the trained wordnet-chat model does, measured on our engine in Node:
//   loss      held-out loss per runner and weight format, against the trainer's (pretrained/.../training.json)
//   kv        held-out loss per KV cache element type (KV_DTYPE fp32, fp16, int8) on the kernels
//   english   share of dictionary words in seeded chat replies at temperature 0.8 (needs wordnet-base)
//   speculate acceptance and tokens/s of n-gram and draft-model speculation against plain decoding
//   structured a JSON schema {word, part_of_speech, definition} and a forced tool call
// Options: --backends kernels,cpu,ort-wasm[,webgpu] (webgpu: run under `node --liftoff-only --import tsx`),
// --sections loss,kv,english,speculate,structured. Prints JSON, one object per measurement.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Engine, type EngineOptions } from '../src/engine/engine.js';
import type { GenerationRequest } from '../src/engine/request.js';
import type { DoneEvent } from '../src/engine/sequence-output.js';
import { KV_DTYPES, type KvDtype } from '../src/engine/kv/kv-dtype.js';
import { directorySource } from '../src/sources/directory-source.js';
import { TOOL_CALL_SUFFIX, toolCallPrefix } from '../src/tokenizer/tool-format.js';
import { nodeRuntime, type NodeBackend } from './lib/runtimes.js';
import type { Dtype } from './model/weight-ops.js';
import { DEFINE_TOOL } from './wordnet/chat-corpus.js';
import { countDictionaryWords } from './wordnet/english-words.js';
import { heldoutLoss } from './wordnet/heldout-loss.js';
import { readWordNet } from './wordnet/wordnet-db.js';
import { answerHelp } from './lib/help.js';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const MODEL = join(ROOT, 'models/wordnet-chat');
const DRAFT = join(ROOT, 'models/wordnet-chat-draft');
const TRAINING = join(ROOT, 'pretrained/wordnet-chat/training.json');

/** The prompts of the English measurement: what a first visitor and the corpus ask, and some it never saw. */
export const ENGLISH_PROMPTS = [
  'Hi',
  'Hello! What can you do?',
  'What does dog mean?',
  'Define happiness.',
  'Use river in a sentence.',
  'What is another word for big?',
  'What part of speech is quickly?',
  'Tell me about paged KV caches.',
  'What does serendipity mean?',
  'Explain the word bank.',
  'Give me a synonym for fast.',
  'What is the meaning of light?',
  'Good morning!',
  'What does computer mean?',
  'How do you use bright?',
  'Summarise in one line: Paged KV caches let sessions share their system prompt.',
];

const WORD_SCHEMA = {
  type: 'object',
  properties: {
    word: { type: 'string' },
    part_of_speech: { type: 'string', enum: ['noun', 'verb', 'adjective', 'adverb'] },
    definition: { type: 'string' },
  },
  required: ['word', 'part_of_speech', 'definition'],
  additionalProperties: false,
};

async function load(backend: NodeBackend, dtype: Dtype, options: EngineOptions = {}): Promise<Engine> {
  return Engine.load(await nodeRuntime(backend), directorySource(MODEL), { ...options, dtype });
}

async function run(engine: Engine, request: GenerationRequest): Promise<DoneEvent> {
  for await (const event of engine.generate(request)) if (event.type === 'done') return event;
  throw new Error('no done event');
}

const chat = (content: string) => [{ role: 'user', content }];

async function lossSection(backends: NodeBackend[]): Promise<void> {
  const training = JSON.parse(readFileSync(TRAINING, 'utf8'));
  const chunks: number[][] = training.reference.chunks;
  const want = (training.reference.loss_sums as number[]).reduce((a, b) => a + b, 0);
  for (const backend of backends) {
    for (const dtype of ['fp32', 'fp16', 'int8', 'q4'] as const) {
      let engine: Engine;
      try {
        engine = await load(backend, dtype);
      } catch (e) {
        console.log(JSON.stringify({ section: 'loss', backend, dtype, error: (e as Error).message.slice(0, 200) }));
        continue;
      }
      const got = await heldoutLoss(engine, chunks);
      await engine.runner.release();
      const trainer = want / got.tokens;
      console.log(
        JSON.stringify({
          section: 'loss',
          backend,
          dtype,
          tokens: got.tokens,
          engine: got.mean,
          trainer,
          delta: got.mean - trainer,
        }),
      );
    }
  }
}

/**
 * Held-out loss per KV cache element type on the kernels (the only runner with fp16 and int8 pools), for
 * float and 4-bit weights: each against fp16 KV, the dtype a tight isolate would otherwise pick.
 */
async function kvSection(): Promise<void> {
  const training = JSON.parse(readFileSync(TRAINING, 'utf8'));
  const chunks: number[][] = training.reference.chunks;
  for (const dtype of ['fp32', 'q4'] as const) {
    const losses = new Map<KvDtype, number>();
    for (const kvDtype of KV_DTYPES) {
      const engine = await load('kernels', dtype, { kvDtype });
      losses.set(kvDtype, (await heldoutLoss(engine, chunks)).mean);
      await engine.runner.release();
    }
    for (const [kvDtype, loss] of losses)
      console.log(JSON.stringify({ section: 'kv', dtype, kvDtype, loss, deltaFromFp16: loss - losses.get('fp16')! }));
  }
}

async function englishSection(backend: NodeBackend): Promise<void> {
  const { dictionary } = readWordNet();
  const engine = await load(backend, 'fp32');
  const replies: string[] = [];
  for (const [i, prompt] of ENGLISH_PROMPTS.entries()) {
    const done = await run(engine, { messages: chat(prompt), temperature: 0.8, seed: i + 1, max_tokens: 64 });
    replies.push(done.text);
  }
  await engine.runner.release();
  const count = countDictionaryWords(replies, dictionary);
  console.log(
    JSON.stringify({
      section: 'english',
      backend,
      replies: replies.length,
      words: count.words,
      dictionaryWords: count.known,
      share: count.known / count.words,
      unknown: count.unknown,
      samples: ENGLISH_PROMPTS.map((p, i) => ({ prompt: p, reply: replies[i] })),
    }),
  );
}

async function speculateSection(backend: NodeBackend): Promise<void> {
  const engine = await load(backend, 'fp32', { draft: { source: directorySource(DRAFT) } });
  const prompts = ENGLISH_PROMPTS.slice(2, 12);
  const methods = [undefined, { method: 'ngram', num_tokens: 4 }, { method: 'draft', num_tokens: 4 }] as const;
  for (const speculative of methods) {
    let proposed = 0;
    let accepted = 0;
    let tokens = 0;
    let ms = 0;
    const texts: string[] = [];
    for (const prompt of prompts) {
      const done = await run(engine, {
        messages: chat(prompt),
        temperature: 0,
        max_tokens: 96,
        speculative: speculative ?? null,
      });
      proposed += done.speculation?.proposedTokens ?? 0;
      accepted += done.speculation?.acceptedTokens ?? 0;
      tokens += done.metrics.completionTokens;
      ms += done.metrics.totalMs - done.metrics.ttftMs;
      texts.push(done.text);
    }
    console.log(
      JSON.stringify({
        section: 'speculate',
        backend,
        method: speculative?.method ?? 'none',
        gamma: speculative?.num_tokens ?? 0,
        tokens,
        acceptance: proposed ? accepted / proposed : null,
        decodeTokensPerS: (tokens - prompts.length) / (ms / 1000),
        texts,
      }),
    );
  }
  await engine.runner.release();
}

async function structuredSection(backend: NodeBackend): Promise<void> {
  const { dictionary } = readWordNet();
  const engine = await load(backend, 'fp32');
  const words = ['dog', 'happiness', 'river', 'quickly', 'bright', 'serendipity'];
  const outputs: { word: string; json: string; valid: boolean }[] = [];
  for (const [i, word] of words.entries()) {
    const done = await run(engine, {
      messages: chat(`Describe ${word} as JSON.`),
      temperature: 0.8,
      seed: i + 1,
      max_tokens: 128,
      constraint: { spec: { type: 'json_schema', schema: WORD_SCHEMA }, param: 'response_format' },
    });
    let valid = false;
    try {
      const parsed = JSON.parse(done.text);
      valid = ['word', 'part_of_speech', 'definition'].every((k) => typeof parsed[k] === 'string');
    } catch {}
    outputs.push({ word, json: done.text, valid });
  }
  const calls: string[] = [];
  for (const [i, word] of words.entries()) {
    const done = await run(engine, {
      messages: chat(`What does ${word} mean?`),
      tools: [DEFINE_TOOL],
      temperature: 0.8,
      seed: i + 1,
      max_tokens: 64,
      constraint: {
        spec: {
          type: 'tool_calls',
          parallel: false,
          tags: [
            { begin: toolCallPrefix('define_word'), schema: DEFINE_TOOL.function.parameters, end: TOOL_CALL_SUFFIX },
          ],
        },
        param: 'tools',
      },
    });
    calls.push(done.text);
  }
  await engine.runner.release();
  const definitions = outputs.filter((o) => o.valid).map((o) => JSON.parse(o.json).definition as string);
  const count = countDictionaryWords(definitions, dictionary);
  console.log(
    JSON.stringify({
      section: 'structured',
      backend,
      valid: outputs.filter((o) => o.valid).length,
      of: outputs.length,
      definitionDictionaryShare: count.known / count.words,
      outputs,
      toolCalls: calls,
    }),
  );
}

answerHelp(`Usage: npm run model:quality -- [--backends kernels,cpu,ort-wasm[,webgpu]] [--sections loss,kv,english,speculate,structured]
Measures the trained wordnet-chat model on our engine in Node and prints JSON, one object per measurement:
  loss       held-out loss per runner and weight format, against the trainer's
  kv         held-out loss per KV cache element type (fp32, fp16, int8) on the kernels
  english    share of dictionary words in seeded chat replies (needs wordnet-base)
  speculate  acceptance and tokens/s of n-gram and draft-model speculation
  structured a JSON schema and a forced tool call`);

function option(name: string, fallback: string): string[] {
  const i = process.argv.indexOf(`--${name}`);
  return (i >= 0 ? process.argv[i + 1] : fallback).split(',');
}

const backends = option('backends', 'kernels,cpu,ort-wasm') as NodeBackend[];
const sections = option('sections', 'loss,kv,english,speculate,structured');
if (sections.includes('loss')) await lossSection(backends);
if (sections.includes('kv')) await kvSection();
if (sections.includes('english')) await englishSection(backends[0]);
if (sections.includes('speculate')) await speculateSection(backends[0]);
if (sections.includes('structured')) await structuredSection(backends[0]);
