import type { ResolvedRequest } from '../request.js';
import type { RequestGroup, Sequence, GenerationMode, ModeHost } from '../sequence.js';
import type { Speculator } from '../speculative/speculator.js';
import { BeamMode } from './beam-mode.js';
import { EmbeddingMode } from './embedding-mode.js';
import { SamplingMode } from './sampling-mode.js';
import { SpeculativeMode } from './speculative-mode.js';

/**
 * The one place that picks how a request generates: a new way of generating is a mode here, not a flag in the
 * step. `sequences` are the request's: one for a beam search (it forks as it goes), else its n completions.
 */
export function createMode(
  resolved: ResolvedRequest,
  group: RequestGroup,
  sequences: readonly Sequence[],
  host: ModeHost,
  speculator: Speculator,
): GenerationMode {
  const [first, ...siblings] = sequences;
  if (resolved.embedding) return new EmbeddingMode(host, first, resolved.embedding);
  if (resolved.beam) return new BeamMode(host, group, first, resolved);
  if (resolved.speculative) return new SpeculativeMode(host, first, siblings, speculator);
  return new SamplingMode(host, first, siblings);
}

/** How many sequences a request starts with: a beam search one, others their n. */
export function startingSequences(resolved: ResolvedRequest): number {
  return resolved.beam ? 1 : resolved.n;
}

/** Whether a request's tokens may be drawn on the device (where the runner samples): not while verifying or searching. */
export function drawsOnDevice(resolved: ResolvedRequest): boolean {
  return !resolved.speculative && !resolved.beam && !resolved.embedding;
}
