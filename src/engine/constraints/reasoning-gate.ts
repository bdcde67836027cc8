import type { CompiledConstraint } from './compiler.js';
import type { GrammarMatcher } from './matcher.js';

/**
 * Structured outputs for a model that reasons first: the grammar (a JSON schema, a forced tool call) holds
 * for the answer, not for the thinking before it. A sequence starts `before` (the model may open its
 * reasoning with the begin marker, or start the answer at once under the grammar), is `inside` while it
 * reasons (every token allowed, until the end marker's tokens close it), and `after` follows the grammar.
 * Only token ids are compared; which markers a model uses is the caller's to say.
 */
type Phase = 'before' | 'inside' | 'after';

/** The markers as token ids: the begin marker must be one token (as `<think>` is in every model that has it). */
export interface ReasoningMarkers {
  begin: number;
  end: readonly number[];
}

/** A grammar matcher that lets a reasoning span through before its grammar starts. */
export class ReasoningGate implements GrammarMatcher {
  readonly mask: Int32Array;
  private phase: Phase;
  /** Tokens since the span opened, as far as the end marker's length needs. */
  private recent: number[];

  constructor(
    private readonly inner: GrammarMatcher,
    private readonly markers: ReasoningMarkers,
    phase: Phase,
    recent: number[] = [],
  ) {
    this.phase = phase;
    this.recent = recent;
    this.mask = new Int32Array(inner.mask.length);
  }

  nextMask(): Int32Array {
    if (this.phase === 'after') return this.inner.nextMask();
    if (this.phase === 'inside') {
      this.mask.fill(-1);
      return this.mask;
    }
    this.mask.set(this.inner.nextMask());
    const begin = this.markers.begin;
    if (begin >> 5 < this.mask.length) this.mask[begin >> 5] |= 1 << (begin & 31);
    return this.mask;
  }

  accept(tokenId: number): boolean {
    if (this.phase === 'after') return this.inner.accept(tokenId);
    if (this.phase === 'before') {
      if (tokenId === this.markers.begin) {
        this.phase = 'inside';
        return true;
      }
      if (!this.inner.accept(tokenId)) return false;
      this.phase = 'after';
      return true;
    }
    const end = this.markers.end;
    this.recent.push(tokenId);
    if (this.recent.length > end.length) this.recent.shift();
    if (this.recent.length === end.length && this.recent.every((t, i) => t === end[i])) this.phase = 'after';
    return true;
  }

  fork(): ReasoningGate {
    return new ReasoningGate(this.inner.fork(), this.markers, this.phase, [...this.recent]);
  }

  get terminated(): boolean {
    return this.phase === 'after' && this.inner.terminated;
  }

  dispose(): void {
    this.inner.dispose();
  }
}

/**
 * Where a prompt leaves the model, judged by its last `window` tokens: inside an opened span (DeepSeek-R1's
 * template writes the begin marker itself), past a closed one (Qwen3's with `enable_thinking: false` writes
 * an empty span), or before any.
 */
export function promptPhase(promptIds: readonly number[], markers: ReasoningMarkers, window = 16): Phase | 'closed' {
  const tail = promptIds.slice(-window);
  const opened = tail.lastIndexOf(markers.begin);
  const closed = lastIndexOfRun(tail, markers.end);
  if (opened >= 0 && opened > closed) return 'inside';
  if (closed >= 0) return 'closed';
  return 'before';
}

function lastIndexOfRun(tokens: readonly number[], run: readonly number[]): number {
  for (let i = tokens.length - run.length; i >= 0; i--) if (run.every((t, j) => tokens[i + j] === t)) return i;
  return -1;
}

/**
 * The constraint deferred past the reasoning the prompt leaves the model to write; unchanged where the
 * prompt closed it already, or where the begin marker is not one token (the grammar then holds throughout).
 */
export function deferPastReasoning(
  constraint: CompiledConstraint,
  markers: { begin: readonly number[]; end: readonly number[] },
  promptIds: readonly number[],
): CompiledConstraint {
  if (markers.begin.length !== 1 || markers.end.length === 0) return constraint;
  const ids: ReasoningMarkers = { begin: markers.begin[0], end: markers.end };
  const phase = promptPhase(promptIds, ids);
  if (phase === 'closed') return constraint;
  return {
    key: constraint.key,
    matcher: (stops) => new ReasoningGate(constraint.matcher(stops), ids, phase),
  };
}
