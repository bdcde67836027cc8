import type { VocabRows } from '../llama-weights.js';
import type { Writer } from '../matrix-builders.js';
import { UnsupportedByKernels } from '../../../../formats/unsupported.js';
import type { InitializerHeader } from '../../../../formats/onnx/onnx-stream.js';

/**
 * One part of a vocabulary table (its weight, scales or zero points) cut to a stage's rows as it streams in:
 * the header the builder sees (as if the file held those rows only), and a writer that passes on the bytes
 * of those rows, shifted to where they start. A part is cut when its rows are token ids laid one after
 * another ((vocab, ...) or a flat vocab x blocks); a single scale or zero point for the whole table is
 * every stage's. A (hidden, vocab) MatMul weight is not laid by rows, and cannot be cut so.
 */
export function windowPart(
  header: InitializerHeader,
  vocabSize: number,
  rows: VocabRows,
): { header: InitializerHeader; wrap(writer: Writer): Writer } {
  const elements = header.dims.reduce((n, d) => n * d, 1);
  if (elements <= 1) return { header, wrap: (writer) => writer };
  const byRows = header.dims[0] === vocabSize || (header.dims.length === 1 && header.dims[0] % vocabSize === 0);
  if (!byRows || header.bytes % vocabSize !== 0)
    throw new UnsupportedByKernels(
      `${header.name} [${header.dims.join(', ')}] is not laid out by vocabulary rows, so the vocabulary cannot be split over the stages (a (vocab, hidden) table or MatMulNBits can be)`,
    );
  const rowBytes = header.bytes / vocabSize;
  const count = rows.to - rows.from;
  const dims = header.dims.length === 1 ? [(header.dims[0] / vocabSize) * count] : [count, ...header.dims.slice(1)];
  const first = rows.from * rowBytes;
  const end = rows.to * rowBytes;
  return {
    header: { ...header, dims, bytes: count * rowBytes },
    wrap: (writer) => (bytes, offset) => {
      const lo = Math.max(offset, first);
      const hi = Math.min(offset + bytes.length, end);
      if (lo < hi) writer(bytes.subarray(lo - offset, hi - offset), lo - first);
    },
  };
}
