import type { RequestMetrics } from './request-metrics.js';
import { RequestClock } from './request-metrics.js';
import type { ResolvedRequest } from './request.js';
import { SequenceFailedError } from './errors.js';
import { DeviceSamplerState } from './sampling/device-sampler-state.js';
import { TokenSampler, type SampledToken } from './sampling/sampler.js';
import { StopStringMatcher } from './stop-strings.js';
import type { GrammarMatcher } from './constraints/matcher.js';
import type { TextTokenizer } from '../tokenizer/tokenizer.js';
import { IncrementalDetokenizer } from '../tokenizer/incremental-detokenizer.js';
import { PromptLogprobs, type PromptTokenLogprob } from './sampling/prompt-logprobs.js';

export type FinishReason = 'stop' | 'length' | 'cancelled';

export interface TopLogprob {
  tokenId: number;
  logprob: number;
}

/** One generated token, with the text it completed (possibly '', when bytes or a stop string are held back). */
export interface TokenEvent {
  type: 'token';
  /** Which of the request's `n` completions this belongs to. */
  index: number;
  tokenId: number;
  text: string;
  logprob?: number;
  topLogprobs?: TopLogprob[];
}

export interface DoneEvent {
  type: 'done';
  index: number;
  finishReason: FinishReason;
  /** What ended a `stop` finish (as vLLM's stop_reason): the stop token's id, `'string'` for a stop string, else null. */
  stopReason: number | 'string' | null;
  /** Beam search only: this candidate's rank score (cumulativeLogprob / length^α) and summed log-probability. */
  beam?: { score: number; cumulativeLogprob: number };
  /** Speculative decoding only: tokens proposed to the target, and how many it accepted. */
  speculation?: { proposedTokens: number; acceptedTokens: number };
  /** prompt_logprobs only: each prompt token's log-probability given those before it (the first: null). */
  promptLogprobs?: (PromptTokenLogprob | null)[];
  /** Embeddings only: the prompt's pooled vector (engine/embeddings), in place of any token. */
  embedding?: Float32Array;
  /** The whole completion: exactly the concatenation of the token events' texts. */
  text: string;
  promptIds: number[];
  tokenIds: number[];
  metrics: RequestMetrics;
}

export type GenerationEvent = TokenEvent | DoneEvent;

/**
 * The life of one request from its first sampled token to its finish: sampling, incremental
 * detokenisation, stop strings and stop tokens, max_tokens, metrics. It does not run the model; the
 * engine feeds it the logits after each of its steps.
 */
export class SequenceOutput {
  readonly outputIds: number[] = [];
  finishReason: FinishReason | null = null;
  /** Embeddings only: the pooled vector, set once the prompt is prefilled. */
  embedding: Float32Array | undefined;
  private stopReason: number | 'string' | null = null;
  private text = '';
  /** Exactly one of these: the CPU sampler, or the state of a sampler on the device (sampled by the engine). */
  private readonly sampler: TokenSampler | undefined;
  readonly deviceSampler: DeviceSamplerState | undefined;
  /** The prompt's log-probabilities, when asked; siblings (n > 1) share their prefilled one's. */
  promptLogprobs: PromptLogprobs | undefined;
  private readonly detokenizer: IncrementalDetokenizer;
  private readonly stopMatcher: StopStringMatcher;
  /** Structured outputs: where this completion stands in its grammar (undefined = unconstrained). */
  private readonly grammar: GrammarMatcher | undefined;
  private readonly clock = new RequestClock();
  cachedTokens = 0;
  /** Speculative proposals verified for this sequence, and how many stood. */
  readonly speculation = { proposedTokens: 0, acceptedTokens: 0 };

  constructor(
    readonly request: ResolvedRequest,
    private readonly tokenizer: TextTokenizer,
    /** Ids from here up exist in the model but not in the tokenizer: never sampled. */
    private readonly samplableVocab: number,
    /** Which of the request's `n` completions this is. */
    readonly index = 0,
    /** Sample on the device (WebGPU): the engine draws with `deviceSampler` and calls onSampled(). */
    onDevice = false,
  ) {
    const samplerOptions = { vocabSize: samplableVocab, promptTokenIds: request.promptIds };
    if (onDevice) this.deviceSampler = new DeviceSamplerState(request.sampling, samplerOptions);
    else this.sampler = new TokenSampler(request.sampling, samplerOptions);
    this.detokenizer = new IncrementalDetokenizer(tokenizer, { skipSpecialTokens: true });
    this.stopMatcher = new StopStringMatcher(request.stops);
    this.grammar = request.constraint?.matcher([...request.stopTokenIds]);
    if (request.promptLogprobs !== undefined)
      this.promptLogprobs = new PromptLogprobs(request.promptIds, request.promptLogprobs);
  }

  get finished(): boolean {
    return this.finishReason !== null;
  }

  /** Samples the next token from the logits after this sequence's last token, and advances its state. */
  onLogits(logits: Float32Array): TokenEvent {
    return this.emit(this.cpuSampler.sample(this.samplable(logits), this.grammar?.nextMask()));
  }

  /** The tokens this sequence's grammar allows next (structured outputs), for a device draw; undefined when unconstrained. */
  grammarMask(): Int32Array | undefined {
    return this.grammar?.nextMask();
  }

  /** Advances the state with a token its device sampler drew (which recorded it for the penalties). */
  onSampled(sampled: SampledToken): TokenEvent {
    return this.emit(sampled);
  }

  private get cpuSampler(): TokenSampler {
    if (!this.sampler) throw new Error('this sequence samples on the device');
    return this.sampler;
  }

  /**
   * Settles one speculative proposal against the target's logits at its position (see TokenSampler.verify)
   * and advances the state with whichever token stands: the proposal, or the token drawn in its place.
   */
  onProposal(logits: Float32Array, proposed: number, draft?: Float64Array): { event: TokenEvent; accepted: boolean } {
    const verdict = this.cpuSampler.verify(this.samplable(logits), proposed, draft, this.grammar?.nextMask());
    this.speculation.proposedTokens++;
    if (verdict.accepted) this.speculation.acceptedTokens++;
    return { event: this.emit(verdict), accepted: verdict.accepted };
  }

  /** The seed the sampler uses, so proposers can draw reproducibly from a stream of their own. */
  get seed(): number {
    return (this.sampler ?? this.deviceSampler)!.seed;
  }

  private samplable(logits: Float32Array): Float32Array {
    return logits.length > this.samplableVocab ? logits.subarray(0, this.samplableVocab) : logits;
  }

  private emit(sampled: SampledToken): TokenEvent {
    const tokenId = sampled.tokenId;
    // The sampler drew from the grammar's mask, so this fails only where the mask was empty: a grammar
    // with no way on from here (a rule that never ends). Only this sequence fails (see Engine.step).
    if (this.grammar && !this.grammar.accept(tokenId))
      throw new SequenceFailedError(
        `the grammar allows no token after ${this.outputIds.length} generated tokens: no text can complete it`,
        'grammar_dead_end',
      );
    this.outputIds.push(tokenId);
    this.clock.token();

    let text = '';
    if (this.request.stopTokenIds.has(tokenId)) {
      this.stopReason = tokenId;
      text = this.close('stop');
    } else {
      const { emit, stopped } = this.stopMatcher.push(this.detokenizer.push(tokenId));
      text = emit;
      if (stopped) {
        this.finishReason = 'stop';
        this.stopReason = 'string';
      }
      // A grammar that is complete and admits no stop token (ignore_eos) ends the completion itself.
      else if (this.grammar?.terminated) text += this.close('stop');
      else if (this.outputIds.length >= this.request.maxTokens) text += this.close('length');
    }
    if (this.finishReason !== null) this.grammar?.dispose();
    this.text += text;
    const event: TokenEvent = { type: 'token', index: this.index, tokenId, text };
    if (sampled.logprob !== undefined) event.logprob = sampled.logprob;
    if (sampled.topLogprobs) event.topLogprobs = sampled.topLogprobs;
    return event;
  }

  /** Ends the sequence early (its client went away). */
  cancel(): void {
    this.finishReason ??= 'cancelled';
    this.grammar?.dispose();
  }

  done(): DoneEvent {
    return {
      type: 'done',
      index: this.index,
      finishReason: this.finishReason ?? 'cancelled',
      stopReason: this.stopReason,
      text: this.text,
      promptIds: this.request.promptIds,
      tokenIds: [...this.outputIds],
      metrics: this.clock.metrics(this.request.promptIds.length, this.cachedTokens),
      ...(this.request.speculative ? { speculation: { ...this.speculation } } : {}),
      ...(this.promptLogprobs ? { promptLogprobs: this.promptLogprobs.entries } : {}),
      ...(this.embedding ? { embedding: this.embedding } : {}),
    };
  }

  /** An embeddings request's end: its vector instead of tokens. */
  embedded(vector: Float32Array): void {
    this.embedding = vector;
    this.finishReason = 'stop';
  }

  /**
   * The done event of a completion chosen elsewhere (a beam search candidate), detokenised as its stream
   * would have been: a final stop token adds no text.
   */
  doneWith(tokenIds: number[], finishReason: 'stop' | 'length', beam: DoneEvent['beam'], index: number): DoneEvent {
    this.grammar?.dispose(); // beams carry matchers of their own (BeamGroup)
    const last = tokenIds[tokenIds.length - 1];
    const stopped = finishReason === 'stop' && this.request.stopTokenIds.has(last);
    const detokenizer = new IncrementalDetokenizer(this.tokenizer, { skipSpecialTokens: true });
    let text = '';
    for (const id of stopped ? tokenIds.slice(0, -1) : tokenIds) text += detokenizer.push(id);
    text += detokenizer.flush();
    const metrics = this.clock.metrics(this.request.promptIds.length, this.cachedTokens);
    // Nothing streams before the search ends, so the first token arrives with the last.
    metrics.completionTokens = tokenIds.length;
    metrics.ttftMs = metrics.totalMs;
    return {
      type: 'done',
      index,
      finishReason,
      stopReason: stopped ? last : null,
      beam,
      text,
      promptIds: this.request.promptIds,
      tokenIds,
      metrics,
    };
  }

  /** Finishes and releases text held back for an unfinished character or a possible stop string. */
  private close(reason: FinishReason): string {
    this.finishReason = reason;
    const { emit, stopped } = this.stopMatcher.push(this.detokenizer.flush());
    return stopped ? emit : emit + this.stopMatcher.flush();
  }
}
