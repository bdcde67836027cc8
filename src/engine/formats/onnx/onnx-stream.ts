import { ChunkReader } from './chunk-reader.js';
import { UnsupportedByKernels } from '../unsupported.js';
import { readNode, type OnnxNode } from './onnx-node.js';

/** An initializer's header, known before its bytes arrive. */
export interface InitializerHeader {
  name: string;
  /** ONNX TensorProto.DataType: 1 float, 2 uint8, 3 int8, 10 float16, 16 bfloat16, ... */
  dataType: number;
  dims: number[];
  /** raw_data's length. */
  bytes: number;
}

export const ONNX_FLOAT = 1;
export const ONNX_UINT8 = 2;
export const ONNX_INT8 = 3;
export const ONNX_FLOAT16 = 10;
export const ONNX_BFLOAT16 = 16;

/** What the reader does with the graph as it arrives. */
export interface OnnxHandlers {
  /** The graph's nodes, all of them, before the first initializer's bytes (writers put them first). */
  nodes(nodes: OnnxNode[]): void;
  /** Where an initializer's raw_data goes, piece by piece; null skips it. */
  initializer(header: InitializerHeader): ((bytes: Uint8Array, offset: number) => void) | null;
  /** Called once an initializer's bytes have all been handed over. */
  initializerDone(header: InitializerHeader): void;
}

/**
 * Reads an ONNX model as it streams in, never holding it whole: nodes (small) are decoded; each
 * initializer's raw_data goes wherever `handlers` says as it arrives. Relies on the order every ONNX writer
 * uses: GraphProto's nodes (field 1) before its initializers (field 5), and in a TensorProto dims,
 * data_type and name before raw_data. Only ModelProto.graph (7), GraphProto.node (1) and .initializer (5),
 * TensorProto dims (1), data_type (2), name (8) and raw_data (9) are read; all else is skipped by wire type.
 */
export async function streamOnnx(source: AsyncIterable<Uint8Array>, handlers: OnnxHandlers): Promise<void> {
  const r = new ChunkReader(source, 'ONNX file');
  const nodes: OnnxNode[] = [];
  let nodesDone = false;
  while (!(await r.eof())) {
    const tag = await r.varint();
    if (tag !== ((7 << 3) | 2)) {
      await r.skipField(tag & 7);
      continue;
    }
    const graphEnd = (await r.varint()) + r.pos;
    while (r.pos < graphEnd) {
      const t = await r.varint();
      if (t === ((1 << 3) | 2)) {
        if (nodesDone) throw new UnsupportedByKernels('the ONNX file has a node after its initializers');
        nodes.push(readNode(await r.bytes(await r.varint())));
        continue;
      }
      if (t !== ((5 << 3) | 2)) {
        await r.skipField(t & 7);
        continue;
      }
      if (!nodesDone) {
        nodesDone = true;
        handlers.nodes(nodes);
      }
      const tensorEnd = (await r.varint()) + r.pos;
      const header: InitializerHeader = { name: '', dataType: 0, dims: [], bytes: 0 };
      let placed = false;
      while (r.pos < tensorEnd) {
        const f = await r.varint();
        const [field, wire] = [Math.floor(f / 8), f & 7];
        if (field === 1 && wire === 0) header.dims.push(await r.varint());
        else if (field === 1 && wire === 2) {
          const end = (await r.varint()) + r.pos;
          while (r.pos < end) header.dims.push(await r.varint());
        } else if (field === 2 && wire === 0) header.dataType = await r.varint();
        else if (field === 8 && wire === 2) header.name = new TextDecoder().decode(await r.bytes(await r.varint()));
        else if (field === 9 && wire === 2) {
          if (!header.name)
            throw new UnsupportedByKernels("an initializer's raw_data comes before its name in the ONNX file");
          header.bytes = await r.varint();
          const write = handlers.initializer(header);
          if (!write) await r.skip(header.bytes);
          else {
            await r.pass(header.bytes, write);
            placed = true;
          }
        } else await r.skipField(wire);
      }
      if (placed) handlers.initializerDone(header);
    }
  }
  if (!nodesDone) handlers.nodes(nodes);
}
