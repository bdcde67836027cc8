import { halfValue } from '../../../model/half.js';
import type { KernelExports } from '../edge-kernels.js';
import type { LinearMemory } from '../linear-memory.js';
import {
  ONNX_BFLOAT16,
  ONNX_FLOAT,
  ONNX_FLOAT16,
  ONNX_INT8,
  ONNX_UINT8,
  type InitializerHeader,
} from '../../../formats/onnx/onnx-stream.js';
import type { MatrixSource } from './onnx/llama-roles.js';
import {
  interleaveV4,
  quantPlaneBytes,
  sideIndex,
  writeQmat,
  type Matrix,
  type QuantFormat,
  type QuantMatrix,
  type QuantPlanes,
} from './matrix.js';
import { UnsupportedByKernels } from '../../../formats/unsupported.js';

/** Where the bytes of one tensor go as they arrive. */
export type Writer = (bytes: Uint8Array, offset: number) => void;

/** Turns the tensors of one weight matrix, as they stream in, into a Matrix the kernels read. */
export interface MatrixBuilder {
  /** Where a part's bytes go (`w`: the weight or blocks, `scales`, `zeroPoints`). */
  part(part: 'w' | 'scales' | 'zeroPoints', header: InitializerHeader): Writer;
  /** Called when a part's bytes are all in. */
  partDone(part: 'w' | 'scales' | 'zeroPoints'): void;
  /** The matrix, once every part has arrived; throws naming what is missing. */
  finish(): Matrix;
}

/** What building needs of the kernels: their memory, their repacking exports, and a place to report. */
export interface BuildContext {
  memory: LinearMemory;
  kernels: KernelExports;
  /** Lossy conversions say here what they cost (relative RMS error). */
  report(message: string): void;
}

/** K and N of a (K, N) MatMul weight, a transposed one, or an (N, K) table. */
function kn(header: InitializerHeader, transposed: boolean): { k: number; n: number } {
  if (header.dims.length !== 2)
    throw new UnsupportedByKernels(`${header.name} has ${header.dims.length} dimensions, expected 2`);
  const [a, b] = header.dims;
  return transposed ? { k: b, n: a } : { k: a, n: b };
}

/** Writes a quantised matrix's qmat header once its planes are placed. */
export function quantMatrix(
  ctx: BuildContext,
  format: QuantFormat,
  k: number,
  n: number,
  blocks: number,
  planes: QuantPlanes,
  zpConst: number,
): QuantMatrix {
  return { kind: 'quant', format, k, n, blocks, planes, header: writeQmat(ctx.memory, format, zpConst, planes) };
}

const noPlanes = (): QuantPlanes => ({ q: 0, hi: 0, s: 0, m: 0, z: 0, sc: 0, mn: 0 });

/** Values of a float32 / float16 tensor gathered in a JS array (scales: small). */
function floats(bytes: Uint8Array, dataType: number): Float32Array {
  if (dataType === ONNX_FLOAT)
    return new Float32Array(bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength));
  if (dataType === ONNX_FLOAT16) {
    const h = new Uint16Array(bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength));
    return Float32Array.from(h, halfValue);
  }
  throw new UnsupportedByKernels(`scales of element type ${dataType} (float32 or float16 expected)`);
}

/** Gathers a small tensor whole. */
class Staged {
  bytes: Uint8Array;
  constructor(readonly header: InitializerHeader) {
    this.bytes = new Uint8Array(header.bytes);
  }
  readonly write: Writer = (bytes, offset) => this.bytes.set(bytes, offset);
}

/**
 * A float weight (MatMul, Gemm, an embedding table), placed as it is: float32, float16 or bfloat16, in
 * the layout the file has. With `quantize`, a float32 / float16 table becomes 8-bit blocks of 32 per row
 * as it streams in (an embedding beside quantised projections): lossy, and reported.
 */
export class DenseBuilder implements MatrixBuilder {
  private matrix: Matrix | undefined;
  private staging: Uint8Array | undefined;
  private rowsDone = 0;
  private err = 0;
  private norm = 0;

  constructor(
    private readonly ctx: BuildContext,
    private readonly source: MatrixSource,
    private readonly quantize: boolean,
  ) {}

  part(part: string, header: InitializerHeader): Writer {
    if (part !== 'w') throw new UnsupportedByKernels(`${header.name}: a float weight has no ${part}`);
    const { k, n } = kn(header, this.source.transposed);
    const dtype =
      header.dataType === ONNX_FLOAT
        ? 'f32'
        : header.dataType === ONNX_FLOAT16
          ? 'f16'
          : header.dataType === ONNX_BFLOAT16
            ? 'bf16'
            : undefined;
    if (!dtype) throw new UnsupportedByKernels(`${header.name} has element type ${header.dataType}`);
    if (this.quantize && this.source.transposed && dtype !== 'bf16') return this.quantizing(k, n, dtype);
    const ptr = this.ctx.memory.alloc(header.bytes);
    this.matrix = { kind: 'dense', dtype, layout: this.source.transposed ? 'nk' : 'kn', ptr, k, n };
    return (bytes, offset) => this.ctx.memory.write(ptr + offset, bytes);
  }

  /** Rows of an (N, K) table into V8 blocks as they complete. */
  private quantizing(k: number, n: number, dtype: 'f32' | 'f16'): Writer {
    const blocks = Math.ceil(k / 32);
    const planes = noPlanes();
    const bytes = quantPlaneBytes('v8-zp', n, blocks, false);
    planes.q = this.ctx.memory.alloc(bytes.q);
    planes.s = this.ctx.memory.alloc(bytes.s);
    this.ctx.memory.u8(planes.s, bytes.s).fill(0);
    this.matrix = quantMatrix(this.ctx, 'v8-zp', k, n, blocks, planes, 0);
    const rowBytes = k * (dtype === 'f32' ? 4 : 2);
    this.staging = new Uint8Array(rowBytes * 64);
    let held = 0;
    return (piece) => {
      for (let at = 0; at < piece.length; ) {
        const take = Math.min(piece.length - at, this.staging!.length - held);
        this.staging!.set(piece.subarray(at, at + take), held);
        held += take;
        at += take;
        const rows = Math.floor(held / rowBytes);
        if (rows === 0) continue;
        this.quantizeRows(this.staging!.subarray(0, rows * rowBytes), rows, k, dtype);
        this.staging!.copyWithin(0, rows * rowBytes, held);
        held -= rows * rowBytes;
      }
    };
  }

  /** Symmetric 8-bit per block of 32: s = max|x| / 127, q = round(x / s), as our own exports quantise. */
  private quantizeRows(raw: Uint8Array, rows: number, k: number, dtype: 'f32' | 'f16'): void {
    const m = this.matrix as Extract<Matrix, { kind: 'quant' }>;
    const values =
      dtype === 'f32'
        ? new Float32Array(raw.buffer.slice(raw.byteOffset, raw.byteOffset + raw.byteLength))
        : floats(raw, ONNX_FLOAT16);
    const mem = this.ctx.memory;
    for (let r = 0; r < rows; r++) {
      const col = this.rowsDone + r;
      const q = mem.u8(m.planes.q + col * m.blocks * 32, m.blocks * 32);
      const s = mem.f32(m.planes.s, Math.ceil(m.n / 4) * 4 * m.blocks);
      for (let b = 0; b < m.blocks; b++) {
        let amax = 0;
        for (let i = b * 32; i < Math.min(k, b * 32 + 32); i++) amax = Math.max(amax, Math.abs(values[r * k + i]));
        const scale = Math.fround(amax / 127);
        s[sideIndex(col, m.blocks, b)] = scale;
        for (let i = 0; i < 32; i++) {
          const x = b * 32 + i < k ? values[r * k + b * 32 + i] : 0;
          const v = scale === 0 ? 0 : Math.max(-127, Math.min(127, Math.round(x / scale)));
          q[b * 32 + i] = v & 0xff;
          const d = x - v * scale;
          this.err += d * d;
          this.norm += x * x;
        }
      }
    }
    this.rowsDone += rows;
  }

  partDone(): void {}

  finish(): Matrix {
    if (!this.matrix) throw new UnsupportedByKernels(`the weight ${this.source.w} never arrived`);
    if (this.staging) {
      const rel = Math.sqrt(this.err / Math.max(this.norm, 1e-30));
      this.ctx.report(
        `${this.source.w}: ${this.matrix.n} x ${this.matrix.k} float table quantised to 8 bits per block of 32 as it loaded (relative RMS error ${rel.toExponential(2)})`,
      );
    }
    return this.matrix;
  }
}

/**
 * onnxruntime's MatMulNBits (and our 8-bit embedding tables, the same layout): B (N, K / bs, bs * bits / 8)
 * lands in the value plane as it arrives (4-bit nibbles reordered, 8-bit flipped to int8 afterwards, in
 * place); scales and zero points, small, are gathered and spread over the blocks of 32 (a block of 64 or
 * 128 is 2 or 4 of ours with the same scale and zero point: lossless).
 */
export class NBitsBuilder implements MatrixBuilder {
  private q = 0;
  private scales: Staged | undefined;
  private zeroPoints: Staged | undefined;
  private readonly bits: number;
  private readonly bs: number;
  private readonly k: number;
  private readonly n: number;
  private readonly kBlocks: number;
  private readonly blocks: number;

  constructor(
    private readonly ctx: BuildContext,
    source: MatrixSource,
    shape?: { k: number; n: number },
    /** Rows placed, where a stage holds part of a vocabulary table (its parts' headers cut to them). */
    rows?: number,
  ) {
    const nb = source.nbits ?? { ...shape!, bits: 8, blockSize: 32 };
    this.bits = nb.bits;
    this.bs = nb.blockSize;
    this.k = nb.k;
    this.n = rows ?? nb.n;
    if (this.bits !== 4 && this.bits !== 8)
      throw new UnsupportedByKernels(`${source.w}: ${this.bits}-bit MatMulNBits (4 or 8 are read)`);
    if (this.bs < 32 || this.bs % 32 !== 0)
      throw new UnsupportedByKernels(`${source.w}: block size ${this.bs} (a multiple of 32 is read)`);
    this.kBlocks = Math.ceil(this.k / this.bs);
    this.blocks = (this.kBlocks * this.bs) / 32;
  }

  part(part: 'w' | 'scales' | 'zeroPoints', header: InitializerHeader): Writer {
    if (part === 'scales') {
      this.scales = new Staged(header);
      return this.scales.write;
    }
    if (part === 'zeroPoints') {
      this.zeroPoints = new Staged(header);
      return this.zeroPoints.write;
    }
    const blob = (this.bs * this.bits) / 8;
    if (header.dataType !== ONNX_UINT8 || header.bytes !== this.n * this.kBlocks * blob)
      throw new UnsupportedByKernels(`${header.name} is not uint8 [${this.n}, ${this.kBlocks}, ${blob}]`);
    // A 4-bit plane takes whole groups of 4 columns once interleaved (partDone).
    this.q = this.ctx.memory.alloc(
      this.bits === 4 ? quantPlaneBytes('v4-zp', this.n, this.blocks, false).q : header.bytes,
    );
    const q = this.q;
    return (bytes, offset) => this.ctx.memory.write(q + offset, bytes);
  }

  partDone(part: string): void {
    if (part !== 'w') return;
    const cells = this.n * this.blocks;
    if (this.bits === 4) {
      this.ctx.kernels.repack_ort_q4(this.q, cells);
      interleaveV4(this.ctx.memory, this.ctx.kernels, this.q, this.n, this.blocks);
    } else this.ctx.kernels.flip_sign(this.q, cells * 32);
  }

  finish(): Matrix {
    if (!this.q || !this.scales)
      throw new UnsupportedByKernels(`MatMulNBits weight without its ${this.q ? 'scales' : 'blocks'}`);
    const format: QuantFormat = this.bits === 4 ? 'v4-zp' : 'v8-zp';
    const scales = floats(this.scales.bytes, this.scales.header.dataType);
    if (scales.length !== this.n * this.kBlocks)
      throw new UnsupportedByKernels(
        `${this.scales.header.name} has ${scales.length} scales, expected ${this.n * this.kBlocks}`,
      );
    const zp = this.zeroPointValues();
    const dflt = this.bits === 4 ? 8 : 128;
    const perBlock = zp?.some((z) => z !== dflt) === true;
    const bytes = quantPlaneBytes(format, this.n, this.blocks, perBlock);
    const planes = noPlanes();
    planes.q = this.q;
    planes.s = this.ctx.memory.alloc(bytes.s);
    const s = this.ctx.memory.f32(planes.s, bytes.s / 4).fill(0);
    if (perBlock) planes.z = this.ctx.memory.alloc(bytes.z);
    const z = perBlock ? this.ctx.memory.u8(planes.z, bytes.z).fill(0) : undefined;
    const sub = this.bs / 32;
    for (let col = 0; col < this.n; col++)
      for (let kb = 0; kb < this.kBlocks; kb++)
        for (let j = 0; j < sub; j++) {
          const at = sideIndex(col, this.blocks, kb * sub + j);
          s[at] = scales[col * this.kBlocks + kb];
          // V8 keeps int8 values, so its zero point is stored minus 128 (as an int8 byte).
          if (z) z[at] = this.bits === 8 ? (zp![col * this.kBlocks + kb] - 128) & 0xff : zp![col * this.kBlocks + kb];
        }
    return quantMatrix(this.ctx, format, this.k, this.n, this.blocks, planes, this.bits === 4 ? 8 : 0);
  }

  /** Zero points per (column, block of bs), unpacked (4-bit ones come two to a byte, low nibble first). */
  private zeroPointValues(): number[] | undefined {
    if (!this.zeroPoints) return undefined;
    const raw = this.zeroPoints.bytes;
    const out: number[] = [];
    const perCol = this.bits === 4 ? Math.ceil(this.kBlocks / 2) : this.kBlocks;
    if (raw.length !== this.n * perCol)
      throw new UnsupportedByKernels(
        `${this.zeroPoints.header.name} has ${raw.length} bytes, expected ${this.n * perCol}`,
      );
    for (let col = 0; col < this.n; col++)
      for (let kb = 0; kb < this.kBlocks; kb++)
        out.push(this.bits === 4 ? (raw[col * perCol + (kb >> 1)] >> (4 * (kb & 1))) & 15 : raw[col * perCol + kb]);
    return out;
  }
}

/**
 * quantize_dynamic's int8 / uint8 weights: a MatMulInteger weight W (K, N), or a Gather table (N, K) read
 * through DequantizeLinear, with a scale and zero point per tensor or per column. Gathered whole (a
 * MatMulInteger weight must be transposed), then stored as V8 columns: uint8 values minus 128 and their zero
 * points likewise, so int8 and uint8 exports are the same thing to the kernels. Lossless.
 */
export class IntegerBuilder implements MatrixBuilder {
  private w: Staged | undefined;
  private scales: Staged | undefined;
  private zeroPoints: Staged | undefined;

  constructor(
    private readonly ctx: BuildContext,
    /** The weight is stored (N, K), an embedding table's way. */
    private readonly rowMajor = false,
  ) {}

  part(part: 'w' | 'scales' | 'zeroPoints', header: InitializerHeader): Writer {
    const staged = new Staged(header);
    if (part === 'w') this.w = staged;
    else if (part === 'scales') this.scales = staged;
    else this.zeroPoints = staged;
    return staged.write;
  }

  partDone(): void {}

  finish(): Matrix {
    if (!this.w || !this.scales) throw new UnsupportedByKernels('MatMulInteger weight without its scale');
    const { header, bytes } = this.w;
    const { k, n } = kn(header, this.rowMajor);
    const unsigned = header.dataType === ONNX_UINT8;
    if (!unsigned && header.dataType !== ONNX_INT8)
      throw new UnsupportedByKernels(`${header.name} has element type ${header.dataType}`);
    const scales = floats(this.scales.bytes, this.scales.header.dataType);
    const zp = this.zeroPoints?.bytes;
    const perColumn = (values: ArrayLike<number>, what: string) => {
      if (values.length !== 1 && values.length !== n)
        throw new UnsupportedByKernels(`${header.name}: ${values.length} ${what}, expected 1 or ${n}`);
      return (col: number) => values[values.length === 1 ? 0 : col];
    };
    const scaleOf = perColumn(scales, 'scales');
    // Zero points in int8 terms: what V8 subtracts from its int8 values.
    const zpOf = zp ? perColumn(zp, 'zero points') : () => (unsigned ? 128 : 0);
    const zpInt8 = (col: number) => (unsigned ? zpOf(col) - 128 : (zpOf(col) << 24) >> 24);
    const blocks = Math.ceil(k / 32);
    const perBlock = Array.from({ length: n }, (_, c) => zpInt8(c)).some((z, _, all) => z !== all[0]);
    const sizes = quantPlaneBytes('v8-zp', n, blocks, perBlock);
    const mem = this.ctx.memory;
    const planes = noPlanes();
    planes.q = mem.alloc(sizes.q);
    planes.s = mem.alloc(sizes.s);
    if (perBlock) planes.z = mem.alloc(sizes.z);
    const q = mem.u8(planes.q, sizes.q).fill(0);
    const s = mem.f32(planes.s, sizes.s / 4).fill(0);
    const z = perBlock ? mem.u8(planes.z, sizes.z).fill(0) : undefined;
    const at = this.rowMajor ? (kk: number, col: number) => col * k + kk : (kk: number, col: number) => kk * n + col;
    for (let kk = 0; kk < k; kk++)
      for (let col = 0; col < n; col++) q[col * blocks * 32 + kk] = bytes[at(kk, col)] ^ (unsigned ? 0x80 : 0);
    for (let col = 0; col < n; col++)
      for (let b = 0; b < blocks; b++) {
        s[sideIndex(col, blocks, b)] = scaleOf(col);
        if (z) z[sideIndex(col, blocks, b)] = zpInt8(col) & 0xff;
      }
    return quantMatrix(this.ctx, 'v8-zp', k, n, blocks, planes, perBlock ? 0 : zpInt8(0));
  }
}
