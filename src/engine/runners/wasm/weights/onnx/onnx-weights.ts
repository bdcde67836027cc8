import type { ModelConfig } from '../../../../model/config.js';
import {
  DenseBuilder,
  IntegerBuilder,
  NBitsBuilder,
  type BuildContext,
  type MatrixBuilder,
  type Writer,
} from '../matrix-builders.js';
import {
  checkShapes,
  inSpan,
  ropeInvFreq,
  type LayerSpan,
  layerExtras,
  type LayerWeights,
  type LlamaWeights,
  type VocabRows,
} from '../llama-weights.js';
import { matrixBytes, type Matrix } from '../matrix.js';
import { UnsupportedByKernels } from '../../../../formats/unsupported.js';
import { findLlamaSources, type LlamaSources, type MatrixSource } from './llama-roles.js';
import { ONNX_FLOAT, ONNX_FLOAT16, streamOnnx, type InitializerHeader } from '../../../../formats/onnx/onnx-stream.js';
import { halfValue } from '../../../../model/half.js';
import { windowPart } from './vocab-window.js';

/** Our own exports hold their RoPE table under this name; other graphs get it from config.json. */
const OUR_INV_FREQ = 'rope.inv_freq';

/**
 * Streams an ONNX Llama graph into linear memory: its nodes first, from which every weight's role is found
 * (llama-roles.ts), then each initializer goes where its role puts it, converted on the way when the
 * kernels read another layout (matrix-builders.ts). Initializers no role claims (the graph's own constants,
 * a second copy of a table, another stage's layers) are skipped, never held. `budget` sees the weights as
 * they are placed.
 */
export async function loadOnnxWeights(
  chunks: AsyncIterable<Uint8Array>,
  config: ModelConfig,
  ctx: BuildContext,
  budget: (placedBytes: number) => void,
  span: LayerSpan,
): Promise<LlamaWeights> {
  const extras = layerExtras(config);
  // The graph's biases or q/k norms would be left out of the kernels' pass: onnxruntime runs such a graph.
  if (extras.bias || extras.qkNorm)
    throw new UnsupportedByKernels(
      `model_type ${config.modelType} from an ONNX graph (the kernels read its ${extras.bias ? 'q/k/v biases' : 'q/k norms'} from GGUF files)`,
    );
  let sources: LlamaSources | undefined;
  /** Each tensor name's parts: the builder (or the norm vector) that takes it. */
  const claims = new Map<
    string,
    { builder: MatrixBuilder; part: 'w' | 'scales' | 'zeroPoints'; rows: VocabRows | undefined }[]
  >();
  const builders = new Map<MatrixSource, MatrixBuilder>();
  const vectors = new Map<string, number>();
  let invFreq: Float32Array | undefined;
  const start = ctx.memory.used;

  /** `rows`: the source is a vocabulary table of which this span holds those rows. */
  const builderFor = (source: MatrixSource, quantizeTable: boolean, rows?: VocabRows): MatrixBuilder => {
    // One builder per weight tensor: a tied output projection shares its embedding's matrix.
    for (const [s, b] of builders) if (s.w === source.w) return b;
    const b =
      source.op === 'MatMulNBits' || source.table === 'blocks'
        ? new NBitsBuilder(
            ctx,
            source,
            source.op === 'Gather' ? { k: config.hiddenSize, n: config.vocabSize } : undefined,
            rows && rows.to - rows.from,
          )
        : source.op === 'MatMulInteger' || source.table === 'linear'
          ? new IntegerBuilder(ctx, source.transposed)
          : new DenseBuilder(ctx, source, quantizeTable);
    builders.set(source, b);
    for (const part of ['w', 'scales', 'zeroPoints'] as const) {
      const name = source[part];
      if (!name) continue;
      const list = claims.get(name) ?? [];
      list.push({ builder: b, part, rows });
      claims.set(name, list);
    }
    return b;
  };

  await streamOnnx(chunks, {
    nodes(nodes) {
      sources = findLlamaSources(nodes, config.numLayers);
      const matrices = sources.layers.map((l) => [l.q, l.k, l.v, l.o, l.gate, l.up, l.down]);
      // Beside quantised projections, a float table is quantised too (the hub's model_q4 keeps it float32).
      const quantized = matrices.flat().some((m) => m.op === 'MatMulNBits' || m.op === 'MatMulInteger');
      if (span.ends) builderFor(sources.embedding, quantized, span.vocab);
      for (let layer = span.from; layer < span.to; layer++) for (const m of matrices[layer]) builderFor(m, false);
      if (span.ends) builderFor(sources.lmHead, false, span.vocab);
    },
    initializer(header) {
      if (!sources) throw new UnsupportedByKernels('the ONNX graph has no nodes before its initializers');
      if (header.name === OUR_INV_FREQ) {
        const bytes = new Uint8Array(header.bytes);
        return (piece, offset) => {
          bytes.set(piece, offset);
          if (offset + piece.length === header.bytes) invFreq = new Float32Array(bytes.buffer);
        };
      }
      const norm = normOf(sources, header.name);
      if (norm !== null) return inSpan(span, norm) ? vectorWriter(header) : null;
      const parts = claims.get(header.name);
      if (!parts) return null;
      const writers: Writer[] = parts.map(({ builder, part, rows }) => {
        if (!rows) return builder.part(part, header);
        const window = windowPart(header, config.vocabSize, rows);
        return window.wrap(builder.part(part, window.header));
      });
      budget(ctx.memory.used - start);
      if (writers.length === 1) return writers[0];
      return (bytes, offset) => {
        for (const w of writers) w(bytes, offset);
      };
    },
    initializerDone(header) {
      for (const { builder, part } of claims.get(header.name) ?? []) builder.partDone(part);
      budget(ctx.memory.used - start);
    },
  });
  if (!sources) throw new UnsupportedByKernels('the ONNX file holds no graph');
  const s = sources;

  function vectorWriter(header: InitializerHeader): Writer {
    if (header.dataType !== ONNX_FLOAT && header.dataType !== ONNX_FLOAT16)
      throw new UnsupportedByKernels(`${header.name} has element type ${header.dataType}`);
    const ptr = ctx.memory.alloc(config.hiddenSize * 4);
    const raw = new Uint8Array(header.bytes);
    vectors.set(header.name, ptr);
    return (piece, offset) => {
      raw.set(piece, offset);
      if (offset + piece.length < header.bytes) return;
      const values =
        header.dataType === ONNX_FLOAT
          ? new Float32Array(raw.buffer)
          : Float32Array.from(new Uint16Array(raw.buffer), halfValue);
      if (values.length !== config.hiddenSize)
        throw new UnsupportedByKernels(
          `${header.name} has ${values.length} values, expected hidden_size ${config.hiddenSize}`,
        );
      ctx.memory.f32(ptr, values.length).set(values);
    };
  }

  const vector = (name: string): number => {
    const ptr = vectors.get(name);
    if (ptr === undefined) throw new UnsupportedByKernels(`the RMSNorm weight ${name} is not in the file's raw data`);
    return ptr;
  };
  const finished = new Map<MatrixBuilder, Matrix>();
  const matrix = (source: MatrixSource): Matrix => {
    const b = builderFor(source, false);
    const done = finished.get(b);
    if (done) return done;
    const m = b.finish();
    finished.set(b, m);
    return m;
  };
  const layers: LayerWeights[] = [];
  for (let i = span.from; i < span.to; i++) {
    const l = s.layers[i];
    layers[i] = {
      attnNorm: vector(l.attnNorm),
      q: matrix(l.q),
      k: matrix(l.k),
      v: matrix(l.v),
      o: matrix(l.o),
      mlpNorm: vector(l.mlpNorm),
      gate: matrix(l.gate),
      up: matrix(l.up),
      down: matrix(l.down),
    };
  }
  const weights: LlamaWeights = {
    span,
    ends: span.ends ? { embedding: matrix(s.embedding), norm: vector(s.norm), lmHead: matrix(s.lmHead) } : undefined,
    layers,
    invFreq: invFreq ?? ropeInvFreq(config),
    intermediateSize: layers[span.from]?.gate.n ?? 0,
    bytes: 0,
  };
  weights.bytes = [...finished.values()].reduce((n, m) => n + matrixBytes(m), 0) + vectors.size * config.hiddenSize * 4;
  checkShapes(weights, config);
  if (weights.invFreq.length !== config.headDim / 2)
    throw new UnsupportedByKernels(`${OUR_INV_FREQ} has ${weights.invFreq.length} values, expected head_dim / 2`);
  return weights;
}

/** Whether `name` is an RMSNorm weight: undefined for the final norm, its layer for a layer's, null if neither. */
function normOf(s: LlamaSources, name: string): number | undefined | null {
  if (name === s.norm) return undefined;
  const layer = s.layers.findIndex((l) => l.attnNorm === name || l.mlpNorm === name);
  return layer < 0 ? null : layer;
}
