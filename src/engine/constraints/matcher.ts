import type { XgCompiledGrammar, XgGrammarMatcher } from './xgrammar/xgrammar-glue.js';
import type { XgrammarRuntime } from './xgrammar/runtime.js';

/** What a sequence samples under: the tokens allowed next, and its advance by the token chosen. */
export interface GrammarMatcher {
  /** (ceil(vocab / 32)) the last mask asked for. */
  readonly mask: Int32Array;
  nextMask(): Int32Array;
  /** Advances by one token; false (state unchanged) when the grammar does not allow it here. */
  accept(tokenId: number): boolean;
  /** A matcher in the same state, independent from here on (a forked beam's). */
  fork(): GrammarMatcher;
  readonly terminated: boolean;
  dispose(): void;
}

/**
 * One sequence's place in its grammar. The sampler asks it for the tokens allowed next (a bitmask, bit i
 * of word i >> 5 set = token i allowed) and tells it which token was chosen. It advances only on tokens
 * that stand: a speculative proposal is judged against the mask at its position before it is accepted, so
 * a rejected one never enters the matcher. rollback() undoes accepted tokens; fork() gives a beam its own
 * copy (xgrammar has no copy, so the fork is a new matcher that replays the tokens accepted so far).
 */
export class ConstraintMatcher implements GrammarMatcher {
  /** (ceil(vocab / 32)) the last mask asked for. */
  readonly mask: Int32Array;
  private readonly accepted: number[] = [];
  private handle: XgGrammarMatcher | undefined;

  constructor(
    private readonly runtime: XgrammarRuntime,
    private readonly compiled: XgCompiledGrammar,
    private readonly stopTokenIds: readonly number[],
  ) {
    this.handle = runtime.matcher(compiled, stopTokenIds);
    this.mask = new Int32Array(Math.ceil(runtime.vocabSize / 32));
  }

  private get live(): XgGrammarMatcher {
    if (!this.handle) throw new Error('this grammar matcher was disposed');
    return this.handle;
  }

  /** The tokens allowed next, in `mask` (which it returns). */
  nextMask(): Int32Array {
    this.runtime.fillMask(this.live, this.mask);
    return this.mask;
  }

  /** Advances by one token; false (state unchanged) when the grammar does not allow it here. */
  accept(tokenId: number): boolean {
    if (!this.live.AcceptToken(tokenId, false)) return false;
    this.accepted.push(tokenId);
    return true;
  }

  /** Whether `tokenId` is allowed by the last mask asked for. */
  allows(tokenId: number): boolean {
    return maskAllows(this.mask, tokenId);
  }

  /** Undoes the last `count` accepted tokens. */
  rollback(count: number): void {
    if (count <= 0) return;
    if (count > this.accepted.length)
      throw new RangeError(`cannot roll back ${count} tokens; ${this.accepted.length} were accepted`);
    this.live.Rollback(count);
    this.accepted.length -= count;
  }

  /** A matcher in the same state, independent from here on. */
  fork(): ConstraintMatcher {
    const copy = new ConstraintMatcher(this.runtime, this.compiled, this.stopTokenIds);
    for (const token of this.accepted)
      if (!copy.accept(token)) throw new Error('grammar matcher fork failed to replay its tokens');
    return copy;
  }

  /** The grammar is complete and a stop token was accepted (or, with no stop tokens, the grammar is complete). */
  get terminated(): boolean {
    return this.live.IsTerminated();
  }

  /** Frees the matcher's WebAssembly memory; idempotent. */
  dispose(): void {
    this.handle?.delete();
    this.handle = undefined;
  }
}

/**
 * Sets every logit the mask forbids to -Infinity (ids past the mask's reach too). Words of all ones are
 * skipped, which is most of the vocabulary in free-text parts of a grammar.
 */
export function applyTokenBitmask(logits: Float32Array, mask: Int32Array): void {
  const n = logits.length;
  for (let w = 0; w * 32 < n; w++) {
    const word = w < mask.length ? mask[w] : 0;
    if (word === -1) continue;
    const end = Math.min(n, (w + 1) * 32);
    for (let i = w * 32; i < end; i++) if (((word >>> (i & 31)) & 1) === 0) logits[i] = -Infinity;
  }
}

export function maskAllows(mask: Int32Array, tokenId: number): boolean {
  return tokenId >= 0 && tokenId >> 5 < mask.length && ((mask[tokenId >> 5] >>> (tokenId & 31)) & 1) === 1;
}

/** The lowest id the mask allows, or -1: a sampler's last resort when every allowed logit is -Infinity. */
export function firstAllowed(mask: Int32Array, vocabSize: number): number {
  for (let w = 0; w < mask.length; w++) {
    if (mask[w] === 0) continue;
    for (let b = 0; b < 32; b++) {
      const id = w * 32 + b;
      if (id < vocabSize && ((mask[w] >>> b) & 1) === 1) return id;
    }
  }
  return -1;
}
