import { DurableObject } from 'cloudflare:workers';
import { isolateStages } from '../engine/runners/stages/isolate-stages.js';
import { StageServer } from '../engine/runners/stages/stage-server.js';
import type {
  StageAdapterRead,
  StageEnds,
  StageEndsReply,
  StageInfo,
  StageOpen,
  StageRead,
  StageReadReply,
  StageReply,
  StageStep,
} from '../engine/runners/stages/stage-protocol.js';
import { InvalidRequestError } from '../engine/errors.js';
import { intVar, modelLocations, modelName, type Env } from '../env.js';
import { modelSourceFor } from '../sources/model-source.js';
import { stageRuntime } from './stage-runtime.js';

/**
 * One pipeline stage of one head shard: a range of the model's layers and their KV blocks, in a Worker
 * script of its own (so in an isolate of its own, which its stage objects, one per head shard, share). It
 * serves the head's RPC and nothing else: the stage Worker has no public route. Its state is memory only;
 * an object that restarts answers the head's next step as lost, and the head reopens and recomputes.
 */
export class StageObject extends DurableObject<Env> {
  private server: StageServer | undefined;

  /** Loads the stage, or says why it cannot (a refusal crosses RPC as data: an error's class would not). */
  async open(open: StageOpen): Promise<StageInfo | { refused: { param: string; message: string; code: string } }> {
    try {
      return await this.load(open);
    } catch (err) {
      if (!(err instanceof InvalidRequestError)) throw err;
      return { refused: { param: err.param, message: err.message, code: err.code } };
    }
  }

  private async load(open: StageOpen): Promise<StageInfo> {
    const model = modelName(this.env);
    const { source } = await modelSourceFor(model, modelLocations(this.env));
    this.server ??= new StageServer({
      runtime: stageRuntime(this.env),
      source,
      model,
      memoryBudgetBytes: intVar(this.env, 'MEMORY_BUDGET_MB') * 2 ** 20,
      isolate: { models: isolateStages, holder: this.ctx.id.toString() },
    });
    return this.server.open(open);
  }

  async step(step: StageStep): Promise<StageReply> {
    return (await this.server?.step(step)) ?? { lost: true, epoch: undefined };
  }

  read(read: StageRead): StageReadReply {
    return this.server?.read(read) ?? { lost: true, epoch: undefined };
  }

  ends(ends: StageEnds): StageEndsReply {
    return this.server?.ends(ends) ?? { lost: true, epoch: undefined };
  }

  /** Reads an adapter for the head's request, or says why it cannot (as open does, a refusal crosses as data). */
  async adapter(
    read: StageAdapterRead,
  ): Promise<{ lost: boolean } | { refused: { param: string; message: string; code: string } }> {
    if (!this.server) return { lost: true };
    try {
      return await this.server.adapter(read);
    } catch (err) {
      if (!(err instanceof InvalidRequestError)) throw err;
      return { refused: { param: err.param, message: err.message, code: err.code } };
    }
  }

  epoch(): string | undefined {
    return this.server?.epoch;
  }

  close(epoch: string): void {
    this.server?.close(epoch);
  }
}
