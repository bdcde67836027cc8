import { LORA_MODULES, LoraAdapter, type LoraModule } from '../../adapters/lora-adapter.js';
import type { KernelExports } from './edge-kernels.js';
import type { LinearMemory } from './linear-memory.js';
import { CHUNK } from './scratch-layout.js';

/** An adapter's A (rank, in) and Bᵀ (rank, out) placed in a model's linear memory: byte offsets per [layer][module], float32. */
interface Placed {
  region: number;
  at: ({ a: number; b: number } | undefined)[][];
}

/**
 * Where each adapter's matrices lie in one model's memory (placed on first use, freed once the adapter is
 * collected: evicted from its cache and no sequence holds it), and the scratch the deltas are computed in.
 */
class AdapterPlaces {
  private readonly placed = new WeakMap<LoraAdapter, Placed>();
  private readonly freed = new FinalizationRegistry<number>((region) => this.memory.free(region));
  /** (CHUNK, widest) float32 each: the group's gathered inputs, their A products, their deltas. */
  readonly scratch: { x: number; u: number; d: number };

  constructor(
    private readonly memory: LinearMemory,
    widest: number,
  ) {
    const region = memory.alloc(3 * CHUNK * widest * 4);
    this.scratch = { x: region, u: region + CHUNK * widest * 4, d: region + 2 * CHUNK * widest * 4 };
  }

  of(adapter: LoraAdapter): Placed {
    const known = this.placed.get(adapter);
    if (known) return known;
    const region = this.memory.alloc(adapter.bytes);
    let offset = region;
    const at = adapter.deltas.map((layer) =>
      layer.map((d) => {
        if (!d) return undefined;
        if (d.a.length === 0) throw new Error(`adapter ${adapter.name} is placed in another model's memory already`);
        const a = offset;
        this.memory.f32(a, d.a.length).set(d.a);
        const b = a + d.a.byteLength;
        // B transposed, (rank, out): the second product streams along out (matmul_kn_f32), not rank-long dots.
        const bt = this.memory.f32(b, d.b.length);
        for (let o = 0; o < d.out; o++) for (let j = 0; j < d.rank; j++) bt[j * d.out + o] = d.b[o * d.rank + j];
        offset = b + d.b.byteLength;
        // Held once: the memory's copy is the one passes read (an adapter serves one model's memory).
        d.a = new Float32Array(0);
        d.b = new Float32Array(0);
        return { a, b };
      }),
    );
    const placed = { region, at };
    this.placed.set(adapter, placed);
    this.freed.register(adapter, region);
    return placed;
  }
}

const places = new WeakMap<LinearMemory, AdapterPlaces>();

/**
 * The LoRA updates of one kernels pass: each token's adapter (its row's, or none), and for a projection of a
 * chunk of tokens, `out += scale · (x Aᵀ) Bᵀ` for every token whose row runs with an adapter that changes it,
 * tokens grouped per adapter (Punica's and S-LoRA's grouping): each group's inputs gathered, then two float32
 * float32 products on the kernels (x Aᵀ with matmul_nk_f32, then with Bᵀ matmul_kn_f32: each element of both is
 * the same sum whatever the rows, batch invariant), scaled, and each token's delta added to its row. A base row's output is never touched, so its logits are the same
 * bits alone and beside adapter rows; an adapter row's are the same alone and batched.
 */
export class PassAdapters {
  private constructor(
    /** Each token's adapter in the pass (tokens of all rows end to end), undefined for the base. */
    private readonly tokenAdapter: (LoraAdapter | undefined)[],
    private readonly placed: Map<LoraAdapter, Placed>,
    private readonly places: AdapterPlaces,
    private readonly memory: LinearMemory,
    private readonly kernels: KernelExports,
  ) {}

  /**
   * The pass's adapters, or undefined when no row has one (the pass is the base model's alone). Places any adapter
   * not yet in memory: called before the pass makes its views (placing may grow the memory).
   */
  static of(
    variants: readonly unknown[],
    counts: readonly number[],
    memory: LinearMemory,
    kernels: KernelExports,
    widest: number,
  ): PassAdapters | undefined {
    if (variants.every((v) => v === undefined)) return undefined;
    let where = places.get(memory);
    if (!where) {
      where = new AdapterPlaces(memory, widest);
      places.set(memory, where);
    }
    const tokenAdapter: (LoraAdapter | undefined)[] = [];
    const placed = new Map<LoraAdapter, Placed>();
    for (const [r, v] of variants.entries()) {
      if (v !== undefined && !(v instanceof LoraAdapter))
        throw new Error('a row names weights the kernels do not know');
      if (v && !placed.has(v)) placed.set(v, where.of(v));
      for (let i = 0; i < counts[r]; i++) tokenAdapter.push(v);
    }
    return new PassAdapters(tokenAdapter, placed, where, memory, kernels);
  }

  /**
   * Adds each adapter token's update of `module` in `layer` to out (n, out) for the chunk's tokens c0 .. c0 + n,
   * whose input is x (n, in); both pointers into linear memory, float32, row-major.
   */
  add(module: LoraModule, layer: number, out: number, x: number, c0: number, n: number): void {
    const m = LORA_MODULES.indexOf(module);
    const groups = new Map<LoraAdapter, number[]>();
    for (let t = c0; t < c0 + n; t++) {
      const adapter = this.tokenAdapter[t];
      if (!adapter?.deltas[layer]?.[m]) continue;
      const tokens = groups.get(adapter);
      if (tokens) tokens.push(t - c0);
      else groups.set(adapter, [t - c0]);
    }
    if (groups.size === 0) return;
    const k = this.kernels;
    const s = this.places.scratch;
    const bytes = this.memory.u8(0, this.memory.bytes);
    for (const [adapter, tokens] of groups) {
      const { rank, in: K, out: N } = adapter.deltas[layer][m]!;
      const { a, b } = this.placed.get(adapter)!.at[layer][m]!;
      const rows = tokens.length;
      // A run of consecutive tokens (a row's, or the whole pass at batch 1) is read and added to in place.
      const first = tokens[0];
      const run = tokens[rows - 1] === first + rows - 1;
      if (!run)
        for (const [g, local] of tokens.entries())
          bytes.copyWithin(s.x + g * K * 4, x + local * K * 4, x + (local + 1) * K * 4);
      k.matmul_nk_f32(s.u, run ? x + first * K * 4 : s.x, a, rows, K, rank); // (rows, rank) = x Aᵀ
      k.scale_inplace(s.u, adapter.scale, rows * rank);
      k.matmul_kn_f32(s.d, s.u, b, rows, rank, N); // (rows, out) = u Bᵀ, B held as (rank, out)
      if (run) k.add_inplace(out + first * N * 4, s.d, rows * N);
      else for (const [g, local] of tokens.entries()) k.add_inplace(out + local * N * 4, s.d + g * N * 4, N);
    }
  }
}
