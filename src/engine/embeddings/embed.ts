import type { Engine, GenerateOptions } from '../engine.js';
import type { GenerationRequest } from '../request.js';

/** One text's (or token ids') vector and the prompt tokens it took. */
export interface Embedded {
  embedding: Float32Array;
  promptTokens: number;
}

/**
 * The vector of one input: a prefill-only request (EmbeddingMode), batched with whatever else the engine runs.
 * Invalid input throws InvalidRequestError synchronously, before anything is queued, as generate() does.
 */
export function embed(
  engine: Engine,
  input: Pick<GenerationRequest, 'prompt' | 'prompt_ids'>,
  dimensions: number | undefined,
  options: GenerateOptions = {},
): Promise<Embedded> {
  const events = engine.generate(
    { ...input, max_tokens: 1, embedding: dimensions === undefined ? {} : { dimensions } },
    options,
  );
  return (async () => {
    for await (const event of events) {
      if (event.type !== 'done') continue;
      if (!event.embedding) throw new Error(`the embedding ended without a vector (${event.finishReason})`);
      return { embedding: event.embedding, promptTokens: event.promptIds.length };
    }
    throw new Error('the embedding stream ended without a done event');
  })();
}
