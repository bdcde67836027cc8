import { LORA_MODULES, LoraAdapter } from '../../../adapters/lora-adapter.js';
import { BufferUsage } from '../usage.js';
import type { LoraBuffers } from './pass-buffers.js';
import { SLOT, type LoraSite, type PlannedDispatch } from './pass-plan.js';
import type { PassPipelines } from './pipelines.js';
import { LORA_PARAM_WORDS, LORA_THREADS } from './wgsl-lora.js';

/** An adapter on the device: its A and B matrices in one buffer, each projection's offsets in words. */
export interface GpuAdapter {
  /** What the pass's index names it by: unique among the adapters uploaded to one model. */
  id: number;
  adapter: LoraAdapter;
  buffer: GPUBuffer;
  at: ({ a: number; b: number } | undefined)[][];
}

/**
 * The adapters uploaded to one model's device, each once (the host copy stays: an adapter may serve another
 * model's runner too), its buffer destroyed once the adapter is collected (evicted from its cache, and no
 * sequence holds it) or the model is.
 */
export class GpuAdapterStore {
  private readonly uploaded = new WeakMap<LoraAdapter, GpuAdapter>();
  private readonly live = new Map<number, GPUBuffer>();
  private readonly collected = new FinalizationRegistry<number>((id) => {
    this.live.get(id)?.destroy();
    this.live.delete(id);
  });
  private nextId = 1;

  constructor(private readonly device: GPUDevice) {}

  of(adapter: LoraAdapter): GpuAdapter {
    const known = this.uploaded.get(adapter);
    if (known) return known;
    let words = 0;
    const at = adapter.deltas.map((layer) =>
      layer.map((d) => {
        if (!d) return undefined;
        if (d.a.length !== d.rank * d.in || d.b.length !== d.out * d.rank)
          throw new Error(`adapter ${adapter.name}'s matrices were handed to another runner's memory`);
        const a = words;
        words += d.a.length + d.b.length;
        return { a, b: a + d.a.length };
      }),
    );
    const buffer = this.device.createBuffer({
      label: `lora ${adapter.name}`,
      size: Math.max(16, words * 4),
      usage: BufferUsage.STORAGE | BufferUsage.COPY_DST,
      mappedAtCreation: true,
    });
    const data = new Float32Array(buffer.getMappedRange());
    for (const [l, layer] of adapter.deltas.entries())
      for (const [m, d] of layer.entries()) {
        const place = at[l][m];
        if (!d || !place) continue;
        data.set(d.a, place.a);
        data.set(d.b, place.b);
      }
    buffer.unmap();
    const gpu = { id: this.nextId++, adapter, buffer, at };
    this.uploaded.set(adapter, gpu);
    this.live.set(gpu.id, buffer);
    this.collected.register(adapter, gpu.id);
    return gpu;
  }

  destroy(): void {
    for (const b of this.live.values()) b.destroy();
    this.live.clear();
  }
}

interface Recorded {
  pipeline: GPUComputePipeline;
  bindGroup: GPUBindGroup;
  grid(M: number): [number, number, number];
}

/**
 * One adapter's dispatches in one runner's plan: for every product it changes, lora_a then lora_b (wgsl-lora.ts),
 * their bind groups and parameters made once per plan (the pass buffers they bind are the plan's).
 */
class AdapterDispatches {
  readonly before = new Map<PlannedDispatch, Recorded[]>();
  private readonly uniforms: GPUBuffer;

  constructor(
    device: GPUDevice,
    p: PassPipelines,
    readonly plan: readonly PlannedDispatch[],
    gpu: GpuAdapter,
    b: LoraBuffers,
    step: GPUBuffer,
    layers: number,
  ) {
    const { adapter } = gpu;
    const sites: { dispatch: PlannedDispatch; site: LoraSite; m: LoraSite['modules'][number] }[] = [];
    for (const dispatch of plan)
      for (const m of dispatch.lora?.modules ?? [])
        if (adapter.deltas[dispatch.lora!.layer]?.[m.module]) sites.push({ dispatch, site: dispatch.lora!, m });
    this.uniforms = device.createBuffer({
      label: `lora ${adapter.name} params`,
      size: Math.max(1, sites.length) * SLOT,
      usage: BufferUsage.UNIFORM | BufferUsage.COPY_DST,
      mappedAtCreation: true,
    });
    const all = this.uniforms.getMappedRange();
    for (const [i, { site, m }] of sites.entries()) {
      const d = adapter.deltas[site.layer][m.module]!;
      if (d.in !== m.k || d.out !== m.n)
        throw new Error(
          `adapter ${adapter.name}: ${LORA_MODULES[m.module]} of layer ${site.layer} is ${d.out} × ${d.in}, the model's ${m.n} × ${m.k}`,
        );
      const u = new Uint32Array(all, i * SLOT, LORA_PARAM_WORDS);
      const f = new Float32Array(all, i * SLOT, LORA_PARAM_WORDS);
      const place = gpu.at[site.layer][m.module]!;
      u.set([gpu.id, d.rank, d.in, d.out, place.a, place.b, m.ldD, m.colOff]);
      f[8] = adapter.scale;
      u[9] = layers;
    }
    this.uniforms.unmap();
    for (const [i, { dispatch, site, m }] of sites.entries()) {
      const params = { binding: 0, resource: { buffer: this.uniforms, offset: i * SLOT, size: SLOT } };
      const bind = (pipeline: GPUComputePipeline, entries: [number, GPUBuffer][]) =>
        device.createBindGroup({
          label: `lora ${adapter.name} ${site.layer}.${LORA_MODULES[m.module]}`,
          layout: pipeline.getBindGroupLayout(0),
          entries: [params, ...entries.map(([binding, buffer]) => ({ binding, resource: { buffer } }))],
        });
      const rank = adapter.deltas[site.layer][m.module]!.rank;
      const recorded: Recorded[] = [
        {
          pipeline: p.loraA,
          bindGroup: bind(p.loraA, [
            [1, gpu.buffer],
            [2, site.x],
            [3, b.u],
            [5, b.index],
            [6, step],
          ]),
          grid: (M) => [rank, M, 1],
        },
        {
          pipeline: p.loraB,
          bindGroup: bind(p.loraB, [
            [1, gpu.buffer],
            [3, b.u],
            [4, b.d],
            [5, b.index],
            [6, step],
          ]),
          grid: (M) => [Math.ceil(m.n / LORA_THREADS), M, 1],
        },
      ];
      const list = this.before.get(dispatch);
      if (list) list.push(...recorded);
      else this.before.set(dispatch, recorded);
    }
  }

  destroy(): void {
    this.uniforms.destroy();
  }
}

/**
 * The LoRA side of one runner's passes: which adapters a pass's rows run with (slots 1.. in the order they
 * first appear; 0 the base), the index the kernels read that by, and each adapter's dispatches in the current
 * plan, recorded before the products they change.
 */
export class RunnerAdapters {
  private readonly dispatches = new WeakMap<GpuAdapter, AdapterDispatches>();

  constructor(
    private readonly device: GPUDevice,
    private readonly store: GpuAdapterStore,
    private readonly pipelines: PassPipelines,
    private readonly layers: number,
  ) {}

  /**
   * The pass's adapters and its index (each token's slot, then per slot its adapter's id and module masks per
   * layer), or undefined when every row runs on the base.
   */
  pass(
    variants: readonly unknown[],
    counts: readonly number[],
  ): { adapters: GpuAdapter[]; index: Uint32Array<ArrayBuffer> } | undefined {
    if (variants.every((v) => v === undefined)) return undefined;
    const adapters: GpuAdapter[] = [];
    const slotOf = new Map<LoraAdapter, number>();
    const tokens = counts.reduce((a, b) => a + b, 0);
    const slots: number[] = [];
    for (const [r, v] of variants.entries()) {
      if (v !== undefined && !(v instanceof LoraAdapter))
        throw new Error('a row names weights the WGSL pass does not know');
      let slot = 0;
      if (v) {
        slot = slotOf.get(v) ?? 0;
        if (!slot) {
          adapters.push(this.store.of(v));
          slot = adapters.length;
          slotOf.set(v, slot);
        }
      }
      for (let i = 0; i < counts[r]; i++) slots.push(slot);
    }
    const L = this.layers;
    const index = new Uint32Array(tokens + adapters.length * (L + 1));
    index.set(slots);
    for (const [s, gpu] of adapters.entries()) {
      const at = tokens + s * (L + 1);
      index[at] = gpu.id;
      for (let l = 0; l < L; l++) {
        let mask = 0;
        for (const [m, d] of (gpu.adapter.deltas[l] ?? []).entries()) if (d) mask |= 1 << m;
        index[at + 1 + l] = mask;
      }
    }
    return { adapters, index };
  }

  /** The dispatches to record before `dispatch` for the pass's adapters, in slot order. */
  before(
    dispatch: PlannedDispatch,
    adapters: readonly GpuAdapter[],
    plan: readonly PlannedDispatch[],
    buffers: LoraBuffers,
    step: GPUBuffer,
  ): Recorded[] {
    if (!dispatch.lora) return [];
    const out: Recorded[] = [];
    for (const gpu of adapters) {
      let made = this.dispatches.get(gpu);
      if (made?.plan !== plan) {
        // The pass buffers were made anew (a larger pass): its bind groups name the old ones.
        made?.destroy();
        made = new AdapterDispatches(this.device, this.pipelines, plan, gpu, buffers, step, this.layers);
        this.dispatches.set(gpu, made);
      }
      const list = made.before.get(dispatch);
      if (list) out.push(...list);
    }
    return out;
  }
}
