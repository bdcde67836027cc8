import { LORA_MODULES, type LoraModule } from '../../../adapters/lora-adapter.js';
import type { ModelConfig } from '../../../model/config.js';
import type { GpuKvPool } from '../gpu-kv-pool.js';
import { BufferUsage } from '../usage.js';
import type { GpuMatrix, GpuWeights } from './gpu-weights.js';
import type { PassBuffers } from './pass-buffers.js';
import type { PassPipelines } from './pipelines.js';
import { EPILOGUE, MATMUL_ROWS } from './wgsl-matmul.js';
import { MAT_WORDS } from './wgsl-weights.js';

/**
 * A product LoRA may change: its layer, its input, and for each projection it computes (gate and up where they
 * are stacked) the module's index in LORA_MODULES and where its delta lies in D's rows (stride, first column).
 */
export interface LoraSite {
  layer: number;
  x: GPUBuffer;
  modules: { module: number; ldD: number; colOff: number; n: number; k: number }[];
}

/** One dispatch of a recorded pass: its grid from the pass's token count M and logit rows L. */
export interface PlannedDispatch {
  label: string;
  pipeline: GPUComputePipeline;
  bindGroup: GPUBindGroup;
  grid(M: number, L: number): [number, number, number];
  /** The adapters' updates to record before it (gpu-adapters.ts), where the pass has adapter rows. */
  lora?: LoraSite;
}

/** Bytes between two dispatches' parameters in a uniform buffer (minUniformBufferOffsetAlignment at most). */
export const SLOT = 256;

/**
 * A model's whole step as a fixed list of dispatches over fixed buffers: every bind group and every
 * uniform is made once (per capacity of the pass buffers), so recording a step is only setting pipelines
 * and bind groups and sizing grids by M. The order is the kernels' (kernel-runner.ts runLayers), each
 * dispatch reading what the one before it wrote (WebGPU orders a compute pass's dispatches' storage
 * accesses), so the whole step is one compute pass.
 */
export function planPass(
  device: GPUDevice,
  config: ModelConfig,
  w: GpuWeights,
  p: PassPipelines,
  b: PassBuffers,
  kv: GpuKvPool,
): { dispatches: PlannedDispatch[]; uniforms: GPUBuffer } {
  const { hiddenSize: H, numHeads, numKvHeads, headDim, rmsNormEps: eps, attentionScale, slidingWindow } = config;
  const slots: ArrayBuffer[] = [];
  const slot = (fill: (u: Uint32Array, f: Float32Array) => void): number => {
    const bytes = new ArrayBuffer(SLOT);
    fill(new Uint32Array(bytes), new Float32Array(bytes));
    slots.push(bytes);
    return slots.length - 1;
  };
  const pending: {
    label: string;
    pipeline: GPUComputePipeline;
    slot: number;
    buffers: GPUBuffer[];
    grid: PlannedDispatch['grid'];
    lora?: LoraSite;
  }[] = [];
  const add = (
    label: string,
    pipeline: GPUComputePipeline,
    slotIndex: number,
    buffers: GPUBuffer[],
    grid: PlannedDispatch['grid'],
    lora?: LoraSite,
  ): void => {
    pending.push({ label, pipeline, slot: slotIndex, buffers, grid, lora });
  };
  const split = (n: number): [number, number] => {
    const x = Math.min(n, 65535);
    return [x, Math.ceil(n / x)];
  };

  const matmul = (
    label: string,
    m: GpuMatrix,
    x: GPUBuffer,
    y: GPUBuffer,
    mode: number,
    aux?: GPUBuffer,
    rows: 'tokens' | 'logits' = 'tokens',
    stacked = false,
    lora?: { layer: number; module: LoraModule },
  ): void => {
    const first = lora ? LORA_MODULES.indexOf(lora.module) : -1;
    const s = slot((u) => {
      u.set(m.mat);
      u[MAT_WORDS] = mode;
      u[MAT_WORDS + 1] = mode === EPILOGUE.store && aux ? 1 : 0;
      u[MAT_WORDS + 2] = rows === 'logits' ? 1 : 0;
      u[MAT_WORDS + 3] = stacked ? 1 : 0;
      u[MAT_WORDS + 4] = first + 1;
      u[MAT_WORDS + 5] = lora?.layer ?? 0;
      u[MAT_WORDS + 6] = config.numLayers;
    });
    const width = stacked ? m.n / 2 : m.n;
    const [gx, gy] = split(width);
    const site: LoraSite | undefined = lora && {
      layer: lora.layer,
      x,
      modules: (stacked ? [0, 1] : [0]).map((c) => ({
        module: first + c,
        ldD: m.n,
        colOff: c * width,
        n: width,
        k: m.k,
      })),
    };
    const d = b.lora?.d ?? b.dummy;
    const index = b.lora?.index ?? b.dummy;
    add(
      label,
      p.matmul,
      s,
      [m.buffer, x, y, aux ?? b.dummy, b.step, d, index],
      (M, L) => [gx, gy, Math.ceil((rows === 'logits' ? L : M) / MATMUL_ROWS)],
      site,
    );
  };
  const norm = (
    label: string,
    weight: GPUBuffer,
    x: GPUBuffer,
    y: GPUBuffer,
    width: number,
    opts: { accumulate?: boolean; gather?: boolean } = {},
  ): void => {
    const s = slot((u, f) => {
      u[0] = width;
      u[1] = opts.accumulate ? 1 : 0;
      u[2] = opts.gather ? 1 : 0;
      f[4] = eps;
    });
    add(label, p.rmsnorm, s, [weight, y, x, b.rowmap], (M, L) => [opts.gather ? L : M, 1, 1]);
  };
  const normInPlace = (label: string, weight: GPUBuffer, y: GPUBuffer, perToken: number): void => {
    const s = slot((u, f) => {
      u[0] = headDim;
      f[4] = eps;
    });
    add(label, p.rmsnormInPlace, s, [weight, y], (M) => [M, perToken, 1]);
  };

  const embed = slot((u, f) => {
    u.set(w.embedding.mat);
    f[MAT_WORDS] = config.embeddingScale;
  });
  add('embed', p.embed, embed, [w.embedding.buffer, b.residual, b.tok], (M) => [M, 1, 1]);
  const ropeKv = slot((u) => {
    u.set([numHeads, numKvHeads, headDim / 2, kv.blockSize]);
  });
  const f16 = kv.dtype === 'fp16';
  const act = config.hiddenAct === 'gelu_tanh' ? EPILOGUE.gelu : EPILOGUE.silu;
  for (const [i, l] of w.layers.entries()) {
    const sliding = slidingWindow?.layers[i] === true;
    const attention = slot((u, f) => {
      u.set([numHeads, numKvHeads, headDim, kv.blockSize]);
      f[4] = attentionScale;
      u[5] = sliding ? slidingWindow!.size : 0;
    });
    norm(`${i} attn norm`, l.attnNorm, b.residual, b.h, H);
    const site = (module: LoraModule) => ({ layer: i, module });
    matmul(`${i} q`, l.q, b.h, b.q, EPILOGUE.store, l.bias?.q, 'tokens', false, site('q_proj'));
    matmul(`${i} k`, l.k, b.h, b.k, EPILOGUE.store, l.bias?.k, 'tokens', false, site('k_proj'));
    matmul(`${i} v`, l.v, b.h, b.v, EPILOGUE.store, l.bias?.v, 'tokens', false, site('v_proj'));
    if (l.qkNorm) {
      normInPlace(`${i} q norm`, l.qkNorm.q, b.q, numHeads);
      normInPlace(`${i} k norm`, l.qkNorm.k, b.k, numKvHeads);
    }
    add(
      `${i} rope and kv write`,
      f16 ? p.ropeKvF16 : p.ropeKv,
      ropeKv,
      [b.q, b.k, b.v, sliding ? b.ropeLocal : b.rope, kv.keys[i], kv.values[i], b.tok, b.tables],
      (M) => [M, 1, 1],
    );
    add(
      `${i} attention`,
      f16 ? p.attentionF16 : p.attention,
      attention,
      [b.q, kv.keys[i], kv.values[i], b.ctx, b.tok, b.tables],
      (M) => [numHeads, M, 1],
    );
    if (l.postNorm) {
      matmul(`${i} o`, l.o, b.ctx, b.out, EPILOGUE.store, undefined, 'tokens', false, site('o_proj'));
      norm(`${i} post-attention norm`, l.postNorm.attn, b.out, b.residual, H, { accumulate: true });
    } else matmul(`${i} o`, l.o, b.ctx, b.residual, EPILOGUE.accumulate, undefined, 'tokens', false, site('o_proj'));
    norm(`${i} mlp norm`, l.mlpNorm, b.residual, b.h, H);
    if (l.gateUp) matmul(`${i} gate and up`, l.gateUp, b.h, b.act, act, undefined, 'tokens', true, site('gate_proj'));
    else if (l.gate && l.up) {
      matmul(`${i} gate`, l.gate, b.h, b.gate, EPILOGUE.store, undefined, 'tokens', false, site('gate_proj'));
      matmul(`${i} up`, l.up, b.h, b.act, act, b.gate, 'tokens', false, site('up_proj'));
    }
    if (l.postNorm) {
      matmul(`${i} down`, l.down, b.act, b.out, EPILOGUE.store, undefined, 'tokens', false, site('down_proj'));
      norm(`${i} post-mlp norm`, l.postNorm.mlp, b.out, b.residual, H, { accumulate: true });
    } else
      matmul(
        `${i} down`,
        l.down,
        b.act,
        b.residual,
        EPILOGUE.accumulate,
        undefined,
        'tokens',
        false,
        site('down_proj'),
      );
  }
  norm('final norm', w.norm, b.residual, b.lastRows, H, { gather: true });
  matmul('lm head', w.lmHead, b.lastRows, b.logits, EPILOGUE.store, undefined, 'logits');

  const uniforms = device.createBuffer({
    label: 'pass uniforms',
    size: slots.length * SLOT,
    usage: BufferUsage.UNIFORM | BufferUsage.COPY_DST,
    mappedAtCreation: true,
  });
  const all = new Uint8Array(uniforms.getMappedRange());
  for (const [i, s] of slots.entries()) all.set(new Uint8Array(s), i * SLOT);
  uniforms.unmap();
  const dispatches = pending.map(({ label, pipeline, slot: s, buffers, grid, lora }) => ({
    label,
    pipeline,
    grid,
    lora,
    bindGroup: device.createBindGroup({
      label,
      layout: pipeline.getBindGroupLayout(0),
      entries: [
        { binding: 0, resource: { buffer: uniforms, offset: s * SLOT, size: SLOT } },
        ...buffers.map((buffer, i) => ({ binding: i + 1, resource: { buffer } })),
      ],
    }),
  }));
  return { dispatches, uniforms };
}
