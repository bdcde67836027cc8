// Held-out loss as our engine computes it: each chunk of token ids is sent as a prompt with vLLM's
// prompt_logprobs, and the negative log-probabilities of every token after the first are summed. The
// trainer scores the same chunks the same way (scripts/train/train.py, chunk_losses).
import type { Engine } from '../../src/engine/engine.js';

export interface HeldoutLoss {
  /** Summed negative log-likelihood per chunk, nats. */
  sums: number[];
  /** Tokens scored in all (each chunk's length minus one). */
  tokens: number;
  /** Mean nats per scored token. */
  mean: number;
}

export async function heldoutLoss(engine: Engine, chunks: readonly (readonly number[])[]): Promise<HeldoutLoss> {
  const sums = await Promise.all(
    chunks.map(async (chunk) => {
      for await (const event of engine.generate({ prompt_ids: chunk, max_tokens: 1, prompt_logprobs: 0 })) {
        if (event.type !== 'done') continue;
        return event.promptLogprobs!.reduce((sum, entry) => sum - (entry?.logprob ?? 0), 0);
      }
      throw new Error('no done event');
    }),
  );
  const tokens = chunks.reduce((n, c) => n + c.length - 1, 0);
  return { sums, tokens, mean: sums.reduce((a, b) => a + b, 0) / tokens };
}
