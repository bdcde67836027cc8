import { InvalidRequestError } from '../errors.js';
import type { Pooling } from './pooling.js';

/** What a request asks of its vector (OpenAI's `dimensions`); the rest is the model's declaration. */
export interface EmbeddingRequest {
  /** The vector's first `dimensions` components, renormalised (Matryoshka truncation); default all. */
  dimensions?: number;
}

/** An embeddings request after validation: how to pool, and how many components to keep. */
export interface EmbeddingParams {
  pooling: Pooling;
  dimensions: number;
  /** The model's hidden size: the pooled vector's length before truncation. */
  hiddenSize: number;
}

/**
 * Checks `dimensions` against the model: truncation is served where the vector is L2-normalised, since only a
 * normalised vector can be truncated and renormalised (the Matryoshka convention); elsewhere it is refused.
 */
export function resolveEmbeddingParams(
  request: EmbeddingRequest,
  pooling: Pooling,
  hiddenSize: number,
): EmbeddingParams {
  if (pooling.unsupported)
    throw new InvalidRequestError(
      'model',
      `this model's embeddings cannot be served: ${pooling.unsupported}`,
      'unsupported_model',
    );
  const { dimensions } = request;
  if (dimensions === undefined || dimensions === hiddenSize) return { pooling, dimensions: hiddenSize, hiddenSize };
  if (!Number.isSafeInteger(dimensions) || dimensions < 1 || dimensions > hiddenSize)
    throw new InvalidRequestError(
      'dimensions',
      `dimensions must be an integer in [1, ${hiddenSize}], got ${JSON.stringify(dimensions)}`,
      'invalid_value',
    );
  if (!pooling.normalize)
    throw new InvalidRequestError(
      'dimensions',
      `this model's embeddings are not normalised (its modules.json has no Normalize module), so they cannot be truncated: leave dimensions out or give ${hiddenSize}`,
      'unsupported_parameter',
    );
  return { pooling, dimensions, hiddenSize };
}
