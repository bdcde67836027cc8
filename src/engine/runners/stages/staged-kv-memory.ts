import type { KvDtype } from '../../kv/kv-dtype.js';
import { storedBlockBytes, type KvMemory } from '../../kv/kv-memory.js';
import type { KvShape } from '../../kv/block-pool.js';
import type { StageCommands } from './stage-protocol.js';

/** What the pool's memory needs of each stage: its layers, its queue of block commands, and a block read. */
export interface KvStage {
  from: number;
  to: number;
  pending: StageCommands;
  read(block: number): Promise<Uint8Array>;
}

/**
 * The KV memory of a model split over stages: every stage holds every block of the head's pool for its
 * layers. Copies and restores are queued per stage, in the order the pool made them, and go with its next step;
 * a read asks every stage for its layers' part. Block ids are the head's pool's, so prefix caching, forks,
 * beams, preemption and speculative rollback work unchanged.
 */
export class StagedKvMemory implements KvMemory {
  readonly blockBytes: number;
  /** Bytes of one layer of a stored block (its keys, then its values). */
  private readonly layerBytes: number;

  constructor(
    shape: KvShape,
    blockSize: number,
    dtype: KvDtype,
    private readonly stages: readonly KvStage[],
  ) {
    this.blockBytes = storedBlockBytes(shape, blockSize, dtype);
    this.layerBytes = this.blockBytes / shape.numLayers;
  }

  copyBlock(from: number, to: number): void {
    for (const stage of this.stages) stage.pending.ops.push({ op: 'copy', from, to });
  }

  writeBlock(id: number, bytes: Uint8Array): void {
    if (bytes.length !== this.blockBytes)
      throw new RangeError(`a KV block holds ${this.blockBytes} bytes, got ${bytes.length}`);
    for (const stage of this.stages)
      stage.pending.ops.push({
        op: 'write',
        block: id,
        bytes: bytes.slice(stage.from * this.layerBytes, stage.to * this.layerBytes),
      });
  }

  async readBlock(id: number): Promise<Uint8Array> {
    const parts = await Promise.all(this.stages.map((stage) => stage.read(id)));
    const out = new Uint8Array(this.blockBytes);
    for (const [i, part] of parts.entries()) out.set(part, this.stages[i].from * this.layerBytes);
    return out;
  }
}
