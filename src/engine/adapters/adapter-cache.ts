import { InvalidRequestError } from '../errors.js';
import type { ModelConfig } from '../model/config.js';
import type { ModelSource } from '../model/model-files.js';
import { mib, type FootprintPart } from '../runners/memory-budget.js';
import { isAdapterName, LoraAdapter, loadLoraAdapter } from './lora-adapter.js';

/** The adapters' share as a part of a memory budget's sum (none where adapters are off). */
export function adapterPart(bytes: number | undefined): FootprintPart[] {
  return bytes ? [{ label: 'LoRA adapters (ADAPTER_CACHE_MB)', bytes }] : [];
}

/** Where a base model's folder lists its adapters (a source such as static assets or a URL cannot list a folder). */
export const ADAPTER_INDEX = 'adapters/index.json';

export interface AdapterCacheStats {
  /** Adapters held now, their bytes, and the share of the memory budget they are kept within. */
  loaded: number;
  bytes: number;
  capacityBytes: number;
  loads: number;
  evictions: number;
}

/**
 * The LoRA adapters of one base model, loaded on first use from the model's folder and kept, least recently used
 * first out, within `capacityBytes` (the share of the memory budget the load counted for them). Shared by every
 * engine of an isolate that serves the model, as the weights are. An evicted adapter is read again when next asked
 * for; a sequence already running with it keeps its arrays until it ends.
 */
export class AdapterCache {
  private readonly held = new Map<string, LoraAdapter>();
  private readonly loading = new Map<string, Promise<LoraAdapter>>();
  private loads = 0;
  private evictions = 0;

  constructor(
    private readonly source: ModelSource,
    private readonly config: ModelConfig,
    readonly capacityBytes: number,
    /** Layers [from, to) only (a pipeline stage's): what it holds of each adapter. */
    private readonly layers?: { from: number; to: number },
  ) {}

  /** Adapter `name`, from the cache or read now; refused (InvalidRequestError) as loadLoraAdapter refuses it. */
  async load(name: string): Promise<LoraAdapter> {
    const held = this.held.get(name);
    if (held) {
      this.held.delete(name);
      this.held.set(name, held); // most recently used last
      return held;
    }
    if (this.capacityBytes <= 0)
      throw new InvalidRequestError(
        'model',
        `'${name}' is not served: LoRA adapters are off for this model (no adapters/ folder, or ADAPTER_CACHE_MB is 0)`,
        'model_not_found',
      );
    let pending = this.loading.get(name);
    if (!pending) {
      pending = this.read(name).finally(() => this.loading.delete(name));
      this.loading.set(name, pending);
    }
    return pending;
  }

  private async read(name: string): Promise<LoraAdapter> {
    const read = await loadLoraAdapter(this.source, name, this.config);
    const adapter = this.layers ? read.forLayers(this.layers.from, this.layers.to) : read;
    if (adapter.bytes > this.capacityBytes)
      throw new InvalidRequestError(
        'model',
        `adapter '${name}': adapters/${name}/adapter_model.safetensors takes ${mib(adapter.bytes)} as float32, more than the ${mib(this.capacityBytes)} kept for adapters (ADAPTER_CACHE_MB)`,
        'invalid_adapter',
      );
    this.loads++;
    let bytes = this.bytes + adapter.bytes;
    for (const [old, held] of this.held) {
      if (bytes <= this.capacityBytes) break;
      this.held.delete(old);
      bytes -= held.bytes;
      this.evictions++;
    }
    this.held.set(name, adapter);
    return adapter;
  }

  /** Whether `name` is held now (for tests and stats). */
  has(name: string): boolean {
    return this.held.has(name);
  }

  private get bytes(): number {
    let n = 0;
    for (const a of this.held.values()) n += a.bytes;
    return n;
  }

  stats(): AdapterCacheStats {
    return {
      loaded: this.held.size,
      bytes: this.bytes,
      capacityBytes: this.capacityBytes,
      loads: this.loads,
      evictions: this.evictions,
    };
  }

  /** The adapters the folder lists in adapters/index.json (a JSON array of names); none without one. */
  list(): Promise<string[]> {
    return listAdapters(this.source);
  }
}

/** The names adapters/index.json lists (valid names only); [] where there is none or it is not a list. */
export async function listAdapters(source: ModelSource): Promise<string[]> {
  const bytes = await source.read(ADAPTER_INDEX);
  if (!bytes) return [];
  try {
    const names = JSON.parse(new TextDecoder().decode(bytes)) as unknown;
    return Array.isArray(names) ? names.filter((n): n is string => typeof n === 'string' && isAdapterName(n)) : [];
  } catch {
    return [];
  }
}

/**
 * A row's adapter as the engine names it to what computes its pass elsewhere (a pipeline stage, a GPU host):
 * that side reads it by name from its own folder and checks it is the same files (their SHA-256).
 */
export interface NamedAdapter {
  name: string;
  identity: string;
}

/** A row's `kv.variant` on the wire: its adapter's name and identity, or nothing for the base. */
export function namedAdapter(variant: unknown): { adapter?: NamedAdapter } {
  return variant instanceof LoraAdapter ? { adapter: { name: variant.name, identity: variant.identity } } : {};
}

/**
 * Each row's adapter as `cache` holds it, read on first use; refused (InvalidRequestError) where this side keeps
 * no adapters, or its files are not the sender's (a rollout half done). `parts` names both sides in the messages.
 */
export function heldAdapters(
  cache: AdapterCache | undefined,
  named: readonly (NamedAdapter | undefined)[],
  parts: { here: string; sender: string; deploy: string },
): Promise<(LoraAdapter | undefined)[]> {
  return Promise.all(
    named.map(async (adapter) => {
      if (!adapter) return undefined;
      if (!cache)
        throw new InvalidRequestError(
          'model',
          `a row runs with adapter '${adapter.name}' but ${parts.here} keeps no adapters`,
          'invalid_adapter',
        );
      const held = await cache.load(adapter.name);
      if (held.identity !== adapter.identity)
        throw new InvalidRequestError(
          'model',
          `adapter '${adapter.name}': ${parts.here}'s adapters/${adapter.name}/ is not ${parts.sender}'s (another SHA-256 of its files): deploy ${parts.deploy} with the same adapter files`,
          'invalid_adapter',
        );
      return held;
    }),
  );
}
