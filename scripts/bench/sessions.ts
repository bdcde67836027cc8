// Session continuation: the time to the first token of a new turn when the engine still holds the
// session's cache (only the new turn is prefilled), against restoring it from the KV block store (as a
// restarted or evicted object does), against rebuilding it (the whole history prefilled, as with no
// store), against a fresh short prompt.
import type { Engine } from '../../src/engine/engine.js';
import { engineTtft, promptIds } from './engine-runs.js';

/** The tokens of a new user turn: what a chat template adds around a short message. */
const TURN_TOKENS = 20;

export interface SessionHistory {
  /** One cached turn: the time to its first token. The history grows by the turn each time. */
  cachedTurnTtftMs(run: number): Promise<number>;
  /** The same prompt with nothing cached: the history rebuilt by prefill. */
  rebuiltTtftMs(run: number): Promise<number>;
  /**
   * A turn after the pool has lost the session (its cache released, every idle block evicted, as in a
   * restarted engine): the history's full blocks restored from the engine's KV store, the rest prefilled.
   */
  restoredTtftMs(run: number): Promise<number>;
  /** Tokens of history the next turn continues from. */
  readonly historyTokens: number;
  release(): void;
}

/** Opens a session with `history` tokens (one prefill, not timed); each turn then continues it. */
export async function openSessionHistory(engine: Engine, history: number, key: string): Promise<SessionHistory> {
  const vocab = engine.samplableVocab;
  let tokens = promptIds(history, 7_000 + history, 0, vocab);
  const turn = async (prompt: number[], session: string | undefined): Promise<{ ms: number; ids: number[] }> => {
    const t0 = performance.now();
    const stream = engine.generate(
      { prompt_ids: prompt, max_tokens: 1, temperature: 0, ignore_eos: true },
      session ? { session } : {},
    );
    const first = await stream.next();
    const ms = performance.now() - t0;
    if (first.done || first.value.type !== 'token') throw new Error('no first token');
    const ids = [first.value.tokenId];
    for await (const _ of stream) void _;
    return { ms, ids };
  };
  const opened = await turn(tokens, key);
  tokens = [...tokens, ...opened.ids];
  return {
    get historyTokens() {
      return tokens.length;
    },
    async cachedTurnTtftMs(run) {
      const prompt = [...tokens, ...promptIds(TURN_TOKENS, 9_000 + run, history, vocab)];
      const { ms, ids } = await turn(prompt, key);
      if (engine.sessionCachedTokens(key) < prompt.length) throw new Error('the session cache was not kept');
      tokens = [...prompt, ...ids];
      return ms;
    },
    async restoredTtftMs(run) {
      await engine.storeKv();
      engine.releaseSession(key);
      engine.evictPrefixCache();
      // The in-memory store holds up to GBs of blocks in this heap (a Durable Object's are in SQLite): collect
      // now, so the timed turn does not pay for garbage the untimed writes made (the child runs with --expose-gc).
      (globalThis as { gc?: () => void }).gc?.();
      const restoredBefore = engine.stats().kvStore?.restored.tokens ?? 0;
      const prompt = [...tokens, ...promptIds(TURN_TOKENS, 11_000 + run, history, vocab)];
      const { ms, ids } = await turn(prompt, key);
      const restored = (engine.stats().kvStore?.restored.tokens ?? 0) - restoredBefore;
      if (restored < tokens.length - 2 * 16)
        throw new Error(`only ${restored} of ${tokens.length} history tokens were restored`);
      tokens = [...prompt, ...ids];
      return ms;
    },
    async rebuiltTtftMs(run) {
      // Same length as a cached turn's prompt, different ids: nothing of it is in the prefix cache.
      return engineTtft(engine, tokens.length + TURN_TOKENS, 50_000 + history * 31 + run);
    },
    release: () => engine.releaseSession(key),
  };
}
