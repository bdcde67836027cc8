// The trained default model, wordnet-chat (pretrained/, imported by `npm run models`): our engine's held-out
// loss equals the trainer's on the same chunks (through prompt_logprobs), the quantised formats lose little,
// and it answers in the corpus's own words and formats.
import { readFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Engine } from '../src/engine/engine.js';
import { GREETING_REPLIES } from '../scripts/wordnet/chat-corpus.js';
import { heldoutLoss } from '../scripts/wordnet/heldout-loss.js';
import { collect, loadEngine, SUITE_BACKEND } from './helpers/engines.js';

interface Training {
  reference: { chunks: number[][]; loss_sums: number[] };
}
const training = JSON.parse(
  readFileSync(new URL('../pretrained/wordnet-chat/training.json', import.meta.url), 'utf8'),
) as Training;
const trainerLoss =
  training.reference.loss_sums.reduce((a, b) => a + b, 0) /
  training.reference.chunks.reduce((n, c) => n + c.length - 1, 0);

// Measured: int8 +0.0002-0.0003 nats/token, q4 +0.006 on every runner (docs/models.md); bounds with room.
const INT8_BOUND = 0.005;
const Q4_BOUND = 0.03;

let engine: Engine;
beforeAll(async () => {
  engine = await loadEngine(SUITE_BACKEND, 'wordnet-chat');
});
afterAll(() => engine.runner.release());

describe('wordnet-chat', () => {
  it("held-out loss in our engine equals the trainer's within 1e-3 nats per token", async () => {
    const { mean, sums } = await heldoutLoss(engine, training.reference.chunks);
    expect(Math.abs(mean - trainerLoss)).toBeLessThan(1e-3);
    // Chunk by chunk too: a wrong position or mask would move single chunks even if the mean survived.
    for (const [i, sum] of sums.entries()) {
      const tokens = training.reference.chunks[i].length - 1;
      expect(Math.abs(sum - training.reference.loss_sums[i]) / tokens).toBeLessThan(1e-3);
    }
  });

  it('int8 and q4 weights cost little held-out loss', async () => {
    for (const [dtype, bound] of [
      ['int8', INT8_BOUND],
      ['q4', Q4_BOUND],
    ] as const) {
      const quantised = await loadEngine(SUITE_BACKEND, 'wordnet-chat', { dtype });
      const { mean } = await heldoutLoss(quantised, training.reference.chunks);
      await quantised.runner.release();
      expect(mean - trainerLoss, dtype).toBeLessThan(bound);
    }
  });

  it('greets in the words of its corpus, and stops at the end of its turn', async () => {
    const { done } = await collect(engine, { messages: [{ role: 'user', content: 'Hi' }], temperature: 0 });
    expect(GREETING_REPLIES).toContain(done.text);
    expect(done.finishReason).toBe('stop');
  });
});
