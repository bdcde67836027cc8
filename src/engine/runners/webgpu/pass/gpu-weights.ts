import type { ModelConfig } from '../../../model/config.js';
import type { LinearMemory } from '../../wasm/linear-memory.js';
import type { LayerWeights, LlamaWeights } from '../../wasm/weights/llama-weights.js';
import { QUANT_FORMATS, quantPlaneBytes, type Matrix, type QuantPlanes } from '../../wasm/weights/matrix.js';
import { BufferUsage } from '../usage.js';
import { DENSE_KINDS, MAT_WORDS, QUANT_KIND_BASE } from './wgsl-weights.js';

/** A weight matrix on the device: its planes in one buffer, and the `Mat` words the shaders decode it by. */
export interface GpuMatrix {
  buffer: GPUBuffer;
  mat: Uint32Array;
  k: number;
  n: number;
}

export interface GpuLayer {
  attnNorm: GPUBuffer;
  q: GpuMatrix;
  k: GpuMatrix;
  v: GpuMatrix;
  o: GpuMatrix;
  mlpNorm: GPUBuffer;
  /** Gate and up stacked along N ([gate; up]) where they are stored alike; else each alone. */
  gateUp?: GpuMatrix;
  gate?: GpuMatrix;
  up?: GpuMatrix;
  down: GpuMatrix;
  bias?: { q: GPUBuffer; k: GPUBuffer; v: GPUBuffer };
  qkNorm?: { q: GPUBuffer; k: GPUBuffer };
  postNorm?: { attn: GPUBuffer; mlp: GPUBuffer };
}

/** A whole model's weights on the device, each uploaded once in the form the kernels hold it. */
export interface GpuWeights {
  layers: GpuLayer[];
  embedding: GpuMatrix;
  norm: GPUBuffer;
  lmHead: GpuMatrix;
  invFreq: Float32Array;
  localInvFreq?: Float32Array;
  intermediateSize: number;
  /** Bytes uploaded. */
  bytes: number;
}

const PLANES: (keyof QuantPlanes)[] = ['q', 'hi', 's', 'm', 'z', 'sc', 'mn'];
const NO_PLANE = 0xffffffff;

/**
 * Copies the weights the kernels' loader placed in linear memory (GGUF blocks repacked losslessly into
 * kernels/quant.h's planes, RoPE rows un-permuted, Gemma's norms shifted) to device buffers, each matrix in
 * its stored form: the shaders dequantise as they read. The linear memory can be dropped afterwards.
 */
export function uploadWeights(
  device: GPUDevice,
  memory: LinearMemory,
  w: LlamaWeights,
  config: ModelConfig,
): GpuWeights {
  if (!w.ends || w.span.from !== 0 || w.span.to !== config.numLayers)
    throw new Error('the WGSL pass runs whole models (not a pipeline stage)');
  let bytes = 0;
  const max = device.limits.maxStorageBufferBindingSize;
  const buffer = (data: Uint8Array, label: string): GPUBuffer => {
    if (data.byteLength > max)
      throw new RangeError(`${label}: ${data.byteLength} bytes exceed the device's ${max}-byte storage binding limit`);
    const size = Math.max(16, Math.ceil(data.byteLength / 16) * 16);
    const b = device.createBuffer({
      label,
      size,
      usage: BufferUsage.STORAGE | BufferUsage.COPY_DST,
      mappedAtCreation: true,
    });
    new Uint8Array(b.getMappedRange()).set(data);
    b.unmap();
    bytes += data.byteLength;
    return b;
  };
  const vector = (ptr: number, n: number, label: string): GPUBuffer => buffer(memory.u8(ptr, n * 4), label);
  /** `parts` stacked along N into one matrix (each part's columns after the last's), as stored. */
  const matrix = (parts: Matrix[], label: string): GpuMatrix => {
    const m = parts[0];
    const n = parts.reduce((sum, p) => sum + p.n, 0);
    const mat = new Uint32Array(MAT_WORDS);
    mat[1] = m.k;
    mat[2] = n;
    const concat = (views: Uint8Array[]): Uint8Array => {
      const out = new Uint8Array(views.reduce((sum, v) => sum + v.byteLength, 0));
      let at = 0;
      for (const v of views) {
        out.set(v, at);
        at += v.byteLength;
      }
      return out;
    };
    if (m.kind === 'dense') {
      mat[0] = DENSE_KINDS[`${m.dtype}-${m.layout}` as keyof typeof DENSE_KINDS];
      if (mat[0] === undefined) throw new Error(`${label}: a ${m.dtype} (K, N) matrix has no shader`);
      const size = (p: Matrix) => p.k * p.n * (m.dtype === 'f32' ? 4 : 2);
      const data = concat(parts.map((p) => memory.u8((p as typeof m).ptr, size(p))));
      return { buffer: buffer(data, label), mat, k: m.k, n };
    }
    mat[0] = QUANT_KIND_BASE + QUANT_FORMATS.indexOf(m.format);
    mat[3] = m.blocks;
    mat[4] = memory.i32(m.header, 2)[1];
    const quant = parts as (typeof m)[];
    const sizes = quant.map((p) => quantPlaneBytes(p.format, p.n, p.blocks, p.planes.z !== 0));
    const planes = PLANES.map((plane) =>
      m.planes[plane] && sizes[0][plane]
        ? concat(quant.map((p, i) => memory.u8(p.planes[plane], sizes[i][plane])))
        : undefined,
    );
    let words = 0;
    const at = planes.map((plane) => {
      if (!plane) return NO_PLANE;
      const start = words;
      words += Math.ceil(plane.byteLength / 4);
      return start;
    });
    const data = new Uint8Array(words * 4);
    planes.forEach((plane, i) => {
      if (plane) data.set(plane, at[i] * 4);
    });
    mat.set(at, 5);
    return { buffer: buffer(data, label), mat, k: m.k, n };
  };
  const { hiddenSize: H, headDim } = config;
  const layer = (l: LayerWeights, i: number): GpuLayer => ({
    attnNorm: vector(l.attnNorm, H, `layer ${i} attn norm`),
    q: matrix([l.q], `layer ${i} q`),
    k: matrix([l.k], `layer ${i} k`),
    v: matrix([l.v], `layer ${i} v`),
    o: matrix([l.o], `layer ${i} o`),
    mlpNorm: vector(l.mlpNorm, H, `layer ${i} mlp norm`),
    ...(stackable(l.gate, l.up, memory)
      ? { gateUp: matrix([l.gate, l.up], `layer ${i} gate and up`) }
      : { gate: matrix([l.gate], `layer ${i} gate`), up: matrix([l.up], `layer ${i} up`) }),
    down: matrix([l.down], `layer ${i} down`),
    bias: l.bias && {
      q: vector(l.bias.q, l.q.n, `layer ${i} q bias`),
      k: vector(l.bias.k, l.k.n, `layer ${i} k bias`),
      v: vector(l.bias.v, l.v.n, `layer ${i} v bias`),
    },
    qkNorm: l.qkNorm && {
      q: vector(l.qkNorm.q, headDim, `layer ${i} q norm`),
      k: vector(l.qkNorm.k, headDim, `layer ${i} k norm`),
    },
    postNorm: l.postNorm && {
      attn: vector(l.postNorm.attn, H, `layer ${i} post-attention norm`),
      mlp: vector(l.postNorm.mlp, H, `layer ${i} post-mlp norm`),
    },
  });
  const layers = w.layers.map(layer);
  const embedding = matrix([w.ends.embedding], 'embedding');
  const lmHead = w.ends.lmHead === w.ends.embedding ? embedding : matrix([w.ends.lmHead], 'lm head');
  return {
    layers,
    embedding,
    norm: vector(w.ends.norm, H, 'final norm'),
    lmHead,
    invFreq: w.invFreq,
    localInvFreq: w.localInvFreq,
    intermediateSize: w.intermediateSize,
    bytes,
  };
}

/** Every buffer of `w`, once (a tied LM head is the embedding's). */
export function weightBuffers(w: GpuWeights): GPUBuffer[] {
  const out = new Set<GPUBuffer>([w.embedding.buffer, w.lmHead.buffer, w.norm]);
  for (const l of w.layers) {
    for (const m of [l.q, l.k, l.v, l.o, l.gateUp, l.gate, l.up, l.down]) if (m) out.add(m.buffer);
    for (const b of [l.attnNorm, l.mlpNorm]) out.add(b);
    for (const group of [l.bias, l.qkNorm, l.postNorm]) if (group) for (const b of Object.values(group)) out.add(b);
  }
  return [...out];
}

/**
 * Whether two matrices can be stacked along N into one (the gate and up products, then one dispatch): the
 * same input width and form, N a multiple of 4 (a quantised matrix's side arrays hold columns in fours), and
 * dense ones stored (N, K), where a matrix's columns are contiguous.
 */
function stackable(a: Matrix, b: Matrix, memory: LinearMemory): boolean {
  if (a.k !== b.k || a.n % 4 !== 0) return false;
  if (a.kind === 'dense' || b.kind === 'dense')
    return a.kind === 'dense' && b.kind === 'dense' && a.dtype === b.dtype && a.layout === 'nk' && b.layout === 'nk';
  return (
    a.format === b.format &&
    a.blocks === b.blocks &&
    PLANES.every((p) => (a.planes[p] === 0) === (b.planes[p] === 0)) &&
    memory.i32(a.header, 2)[1] === memory.i32(b.header, 2)[1]
  );
}
