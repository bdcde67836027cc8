import type { StageServer } from './stage-server.js';
import type {
  StageAdapterRead,
  StageEnds,
  StageEndsReply,
  StageInfo,
  StageLink,
  StageOpen,
  StageRead,
  StageReadReply,
  StageReply,
  StageStep,
} from './stage-protocol.js';

/**
 * A stage in this process (Node, tests): every message is structured-cloned both ways, as Workers RPC
 * carries it, so nothing is shared by reference that the service could not share. `server` may be replaced
 * (a restarted stage: a new server, a new epoch, an empty pool).
 */
export class LocalStageLink implements StageLink {
  constructor(public server: StageServer) {}

  async open(open: StageOpen): Promise<StageInfo> {
    return structuredClone(await this.server.open(structuredClone(open)));
  }

  async step(step: StageStep): Promise<StageReply> {
    return structuredClone(await this.server.step(structuredClone(step)));
  }

  async epoch(): Promise<string | undefined> {
    return this.server.epoch;
  }

  async read(read: StageRead): Promise<StageReadReply> {
    return structuredClone(this.server.read(structuredClone(read)));
  }

  async ends(ends: StageEnds): Promise<StageEndsReply> {
    return structuredClone(this.server.ends(structuredClone(ends)));
  }

  async adapter(read: StageAdapterRead): Promise<{ lost: boolean }> {
    return structuredClone(await this.server.adapter(structuredClone(read)));
  }

  async close(epoch: string): Promise<void> {
    this.server.close(epoch);
  }
}
