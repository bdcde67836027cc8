import { LORA_MODULES, LoraAdapter, type LoraModule } from '../../adapters/lora-adapter.js';
import type { LinearMemory } from './linear-memory.js';

/**
 * The LoRA updates of one kernels pass: each token's adapter (its row's, or none), and for a projection of a
 * chunk of tokens, `out += scale · B (A x)` for every token whose row runs with an adapter that changes it,
 * tokens grouped per adapter (Punica's and S-LoRA's grouping: each adapter's A and B read once a chunk).
 * A token's delta is computed from its own x alone, in the same order whatever the batch, so an adapter row's
 * logits are the same bits alone and batched, and a base row's output is never touched.
 *
 * Computed in TypeScript after the base projection, in float64 rounded once to float32 as it is added
 * (the base product is the kernels' own, q4, int8 or float, unchanged).
 */
export class PassAdapters {
  private readonly u: Float64Array;

  private constructor(
    /** Each token's adapter in the pass (tokens of all rows end to end), undefined for the base. */
    private readonly tokenAdapter: (LoraAdapter | undefined)[],
    private readonly memory: LinearMemory,
  ) {
    let rank = 1;
    for (const a of tokenAdapter) if (a) rank = Math.max(rank, a.rank);
    this.u = new Float64Array(rank);
  }

  /** The pass's adapters, or undefined when no row has one (the pass is the base model's alone). */
  static of(variants: readonly unknown[], counts: readonly number[], memory: LinearMemory): PassAdapters | undefined {
    if (variants.every((v) => v === undefined)) return undefined;
    const tokenAdapter: (LoraAdapter | undefined)[] = [];
    for (const [r, v] of variants.entries()) {
      if (v !== undefined && !(v instanceof LoraAdapter))
        throw new Error('a row names weights the kernels do not know');
      for (let i = 0; i < counts[r]; i++) tokenAdapter.push(v);
    }
    return new PassAdapters(tokenAdapter, memory);
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
    for (const [adapter, tokens] of groups) {
      const d = adapter.deltas[layer][m]!;
      const { a, b, rank, in: K, out: N } = d;
      const xs = this.memory.f32(x, n * K);
      const os = this.memory.f32(out, n * N);
      const u = this.u;
      const scale = adapter.scale;
      for (const local of tokens) {
        const xOff = local * K;
        // u = scale · A x (rank)
        for (let j = 0; j < rank; j++) {
          let s = 0;
          const aOff = j * K;
          for (let i = 0; i < K; i++) s += a[aOff + i] * xs[xOff + i];
          u[j] = s * scale;
        }
        // out += B u (N)
        const oOff = local * N;
        for (let o = 0; o < N; o++) {
          let s = 0;
          const bOff = o * rank;
          for (let j = 0; j < rank; j++) s += b[bOff + j] * u[j];
          os[oOff + o] += s;
        }
      }
    }
  }
}
