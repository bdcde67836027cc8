// Structured outputs after the reasoning, in the engine: tiny-qwen3-think (Qwen3's real tokenizer; its greedy
// answer is `<think>ok</think>\n\nHello`, scripts/model/reasoning-model.ts) under a JSON grammar. Without the
// gate the grammar forbids `<think>` and the model answers at once; with it the model reasons, then the
// grammar shapes the answer. A prompt that closed the reasoning (enable_thinking: false) or opened it (as
// DeepSeek-R1's template does) is read from its tail. Beams fork the gate and speculation verifies against it.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { nodeRuntime } from '../scripts/lib/runtimes.js';
import { writeReasoningModel } from '../scripts/model/reasoning-model.js';
import { Engine } from '../src/engine/engine.js';
import type { GenerationRequest } from '../src/engine/request.js';
import { promptPhase } from '../src/engine/constraints/reasoning-gate.js';
import { constrainAfterReasoning } from '../src/objects/template-reasoning.js';
import { directorySource } from '../src/sources/directory-source.js';
import { collect } from './helpers/engines.js';

const THINK = 151667;
const END_THINK = 151668;
let dir: string;
let engine: Engine;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'reasoning-gate-'));
  await writeReasoningModel(dir);
  engine = await Engine.load(await nodeRuntime('kernels'), directorySource(dir));
}, 60_000);
afterAll(async () => {
  await engine?.runner.release();
  rmSync(dir, { recursive: true, force: true });
});

const messages = [{ role: 'user', content: 'Capital of France?' }];
const json = { spec: { type: 'json_object' as const }, param: 'response_format' };
const text = async (request: GenerationRequest): Promise<string> => (await collect(engine, request)).done.text;
const gated = (request: GenerationRequest): GenerationRequest => constrainAfterReasoning(engine, request);

describe('a grammar deferred past the reasoning', () => {
  it('lets the model reason first, then holds for the answer', async () => {
    const base: GenerationRequest = { messages, max_tokens: 16, temperature: 0 };
    expect(await text(base)).toBe('<think>ok</think>\n\nHello');
    expect(await text({ ...base, constraint: json })).toBe('{}');
    expect(await text(gated({ ...base, constraint: json }))).toBe('<think>ok</think>{}');
  });

  it('reads the prompt: a closed span leaves the grammar from the first token, an opened one frees the start', async () => {
    const closed = gated({
      messages,
      max_tokens: 16,
      temperature: 0,
      constraint: json,
      chat_template_kwargs: { enable_thinking: false },
    });
    expect(await text(closed)).toBe('{}');
    const promptIds = [...engine.resolve({ messages, max_tokens: 1 }).promptIds, THINK];
    expect(await text(gated({ prompt_ids: promptIds, max_tokens: 16, temperature: 0, constraint: json }))).toBe(
      'ok</think>{}',
    );
    const markers = { begin: THINK, end: [END_THINK] };
    expect(promptPhase([1, 2, THINK], markers)).toBe('inside');
    expect(promptPhase([1, THINK, 5, END_THINK, 6], markers)).toBe('closed');
    expect(promptPhase([1, 2, 3], markers)).toBe('before');
  });

  it('beam search and speculation give the greedy answer', async () => {
    const request = { messages, max_tokens: 16, constraint: json };
    const beams = await collect(engine, gated({ ...request, use_beam_search: true, beam_width: 2 }));
    expect(beams.done.text).toBe('<think>ok</think>{}');
    const speculative = gated({ ...request, temperature: 0, speculative: { method: 'ngram', num_tokens: 3 } });
    expect(await text(speculative)).toBe('<think>ok</think>{}');
  });

  it('leaves a request without a constraint as it is; a constrained one carries the markers', async () => {
    const plain: GenerationRequest = { messages, max_tokens: 4 };
    expect(constrainAfterReasoning(engine, plain)).toBe(plain);
    expect(gated({ ...plain, constraint: json }).constraint?.reasoning).toEqual({ begin: '<think>', end: '</think>' });
  });
});
