import { MAX_LORA_RANK } from '../../../adapters/lora-adapter.js';
import type { ModelConfig } from '../../../model/config.js';
import { BufferUsage } from '../usage.js';
import { TOKEN_WORDS } from './wgsl-ops.js';

/** How many tokens and logit rows a pass's buffers hold; past it they are made anew, larger. */
export interface PassCapacity {
  tokens: number;
  logitRows: number;
  tableEntries: number;
  /** Whether it holds LoRA's buffers (made once a pass has adapter rows). */
  lora: boolean;
}

/** Where a pass's LoRA updates are computed (wgsl-lora.ts): made only for a runner that has served an adapter. */
export interface LoraBuffers {
  /** (tokens, MAX_LORA_RANK): each token's x Aᵀ. */
  u: GPUBuffer;
  /** (tokens, widest projection): each token's delta of the projection about to run. */
  d: GPUBuffer;
  /** Each token's slot (0: the base), then per slot its adapter's id and a mask of its modules per layer. */
  index: GPUBuffer;
}

/**
 * The device buffers one pass works in: its inputs (token table, block tables, RoPE tables, the LM head's
 * row map, the step's counts), the activations of every token (residual stream, q, k, v, attention's
 * output, the MLP's), and the logits of the rows asked for. Sized for a capacity, reused pass after pass.
 */
export class PassBuffers {
  readonly step: GPUBuffer;
  readonly tok: GPUBuffer;
  readonly tables: GPUBuffer;
  /** RoPE's cos and sin per token (ropeTable), and the sliding layers' own. */
  readonly rope: GPUBuffer;
  readonly ropeLocal: GPUBuffer;
  readonly rowmap: GPUBuffer;
  readonly residual: GPUBuffer;
  readonly h: GPUBuffer;
  readonly q: GPUBuffer;
  readonly k: GPUBuffer;
  readonly v: GPUBuffer;
  readonly ctx: GPUBuffer;
  readonly out: GPUBuffer;
  readonly gate: GPUBuffer;
  readonly act: GPUBuffer;
  readonly lastRows: GPUBuffer;
  readonly logits: GPUBuffer;
  /** Where logits are copied to be read back. */
  readonly readback: GPUBuffer;
  /** Bound where a kernel's optional input is absent. */
  readonly dummy: GPUBuffer;
  readonly lora: LoraBuffers | undefined;
  private readonly all: GPUBuffer[] = [];

  constructor(
    readonly device: GPUDevice,
    config: ModelConfig,
    intermediateSize: number,
    readonly capacity: PassCapacity,
  ) {
    const { hiddenSize: H, numHeads, numKvHeads, headDim, vocabSize: V } = config;
    const { tokens: M, logitRows: L, tableEntries } = capacity;
    const storage = BufferUsage.STORAGE | BufferUsage.COPY_DST | BufferUsage.COPY_SRC;
    const make = (label: string, floats: number, usage = storage): GPUBuffer => {
      const b = device.createBuffer({ label, size: Math.max(16, Math.ceil(floats / 4) * 16), usage });
      this.all.push(b);
      return b;
    };
    this.step = make('pass step', 4);
    this.tok = make('pass tokens', M * TOKEN_WORDS);
    this.tables = make('pass block tables', tableEntries);
    this.rope = make('rope table', M * headDim);
    this.ropeLocal = make('rope table (sliding layers)', M * headDim);
    this.rowmap = make('logit rows', L);
    this.residual = make('residual', M * H);
    this.h = make('normed', M * H);
    this.q = make('q', M * numHeads * headDim);
    this.k = make('k', M * numKvHeads * headDim);
    this.v = make('v', M * numKvHeads * headDim);
    this.ctx = make('attention out', M * numHeads * headDim);
    this.out = make('projection out', M * H);
    this.gate = make('gate', M * intermediateSize);
    this.act = make('mlp act', M * intermediateSize);
    this.lastRows = make('final normed rows', L * H);
    this.logits = make('logits', L * V);
    this.readback = make('logits readback', L * V, BufferUsage.MAP_READ | BufferUsage.COPY_DST);
    this.dummy = make('absent input', 4);
    const widest = Math.max(numHeads * headDim, H, 2 * intermediateSize);
    this.lora = capacity.lora
      ? {
          u: make('lora x A', M * MAX_LORA_RANK),
          d: make('lora delta', M * widest),
          index: make('lora index', M + L * (config.numLayers + 1)),
        }
      : undefined;
  }

  /** Whether a pass of this size fits. */
  holds(need: PassCapacity): boolean {
    const c = this.capacity;
    return (
      need.tokens <= c.tokens &&
      need.logitRows <= c.logitRows &&
      need.tableEntries <= c.tableEntries &&
      (c.lora || !need.lora)
    );
  }

  destroy(): void {
    for (const b of this.all) b.destroy();
  }
}
