import type { LoadedModel } from '../model-load.js';
import type { FootprintPart } from './memory-budget.js';

/** What the registry shares: a loaded model, or a pipeline stage's layers; each says what it holds once. */
export interface SharedModel {
  shared(): FootprintPart[];
}

/** A model of the isolate: loading (by the engine that asked first), loaded, or failed. */
type ModelEntry<M> = { state: 'loading' } | { state: 'ready'; model: M } | { state: 'failed'; error: unknown };

/** What one engine holds in the isolate besides the shared model, and how to take it back. */
interface Holding {
  key: string;
  /** Counted against the isolate's budget: the KV pool, the engine's own state, its draft. */
  parts: FootprintPart[];
  /** Frees the engine's KV pool (synchronously) and stops its runner: nothing may write there again. */
  release: () => void;
  /** Tells this holding from a later one of the same holder (FinalizationRegistry fires late). */
  token: object;
}

/** How often a second engine looks whether the first one's load has finished. */
const POLL_MS = 20;

/**
 * The models loaded in this isolate, one load each, and what every engine holds beside them: the one
 * instance per isolate (module scope) that lets several Durable Objects of one class, which Cloudflare may
 * run in one isolate (and `wrangler dev` always does), share one copy of the weights and count their
 * memory where the platform counts it.
 *
 * No promise crosses from one object to another: the first engine loads in its own request's context,
 * and every other engine waits for the entry by polling in its own (workerd refuses, or warns about, I/O
 * and promises shared across requests). What is shared is plain memory (the weights, the tokenizer),
 * read synchronously.
 */
export class IsolateModels<M extends SharedModel = LoadedModel> {
  private readonly models = new Map<string, ModelEntry<M>>();
  private readonly holdings = new Map<string, Holding>();
  /** Takes back the pool of an engine the runtime collected (an evicted object), where the runtime has one. */
  private readonly finalizer =
    typeof FinalizationRegistry === 'function'
      ? new FinalizationRegistry<{ holder: string; token: object }>(({ holder, token }) => {
          if (this.holdings.get(holder)?.token === token) this.release(holder);
        })
      : undefined;

  /** The model under `key`: loaded by the first caller, shared with every later one. A failed load is retried by the next caller. */
  async model(key: string, load: () => Promise<M>): Promise<M> {
    for (;;) {
      const entry = this.models.get(key);
      if (entry?.state === 'ready') return entry.model;
      if (entry?.state === 'loading') {
        await new Promise((resolve) => setTimeout(resolve, POLL_MS));
        const after = this.models.get(key);
        if (after?.state === 'failed') throw after.error;
        continue;
      }
      this.models.set(key, { state: 'loading' });
      try {
        const model = await load();
        this.models.set(key, { state: 'ready', model });
        return model;
      } catch (error) {
        // Waiting engines see the failure once; the entry goes, so a later request tries again.
        this.models.set(key, { state: 'failed', error });
        setTimeout(() => {
          if (this.models.get(key)?.state === 'failed') this.models.delete(key);
        }, POLL_MS * 2);
        throw error;
      }
    }
  }

  /**
   * Records what `holder` (an object's id) holds now, for `owner`'s life (its engine). A holder seen before
   * is an object whose earlier instance the runtime replaced: what that instance held is freed first.
   */
  hold(holder: string, key: string, parts: FootprintPart[], release: () => void, owner: object): void {
    this.release(holder);
    const token = {};
    this.holdings.set(holder, { key, parts, release, token });
    this.finalizer?.register(owner, { holder, token });
  }

  /** Frees what `holder` held; its model stays for the others (and for the holder's next engine). */
  release(holder: string): void {
    const holding = this.holdings.get(holder);
    if (!holding) return;
    this.holdings.delete(holder);
    holding.release();
  }

  /** Holders of `key`'s model besides `except`. */
  holders(key: string, except?: string): number {
    let n = 0;
    for (const [holder, h] of this.holdings) if (h.key === key && holder !== except) n++;
    return n;
  }

  /** Everything counted against the isolate's budget, `except`'s holding left out: every model's shared parts, every holding's parts. */
  counted(except?: string): FootprintPart[] {
    const parts: FootprintPart[] = [];
    for (const entry of this.models.values()) if (entry.state === 'ready') parts.push(...entry.model.shared());
    for (const [holder, h] of this.holdings) if (holder !== except) parts.push(...h.parts);
    return parts;
  }

  /** Each loaded model and how many engines hold it, for /metrics and /v1/models. */
  snapshot(): { countedBytes: number; models: { key: string; holders: number }[] } {
    const models = [...this.models].flatMap(([key, entry]) =>
      entry.state === 'ready' ? [{ key, holders: this.holders(key) }] : [],
    );
    return { countedBytes: this.countedBytes(), models };
  }

  /** Bytes counted now (what /metrics shows as the isolate's use). */
  countedBytes(): number {
    return this.counted().reduce((n, p) => n + p.bytes, 0);
  }
}

/** The isolate's registry: module scope, so every object of the Worker script in this isolate sees the same one. */
export const isolateModels = new IsolateModels();
