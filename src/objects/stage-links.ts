import type { StageInfo, StageLink } from '../engine/runners/stages/stage-protocol.js';
import { InvalidRequestError } from '../engine/errors.js';
import { modelName, type Env } from '../env.js';
import type { StageObject } from './stage-object.js';

/** The stage Workers' objects, bound STAGE_1 .. STAGE_N by the generated config (scripts/lib/stage-configs.ts). */
type StageBindings = Record<`STAGE_${number}`, DurableObjectNamespace<StageObject> | undefined>;

/**
 * The name of a head shard's object on a stage Worker: the head (PIPELINE_HEAD: its script, and `npm start`'s
 * run tag), its model and the shard. Another head bound to the same stage scripts (a second deployment, a second
 * pipeline on one machine) names other objects, so neither reopens, and so resets, the other's stages.
 */
export const stageObjectName = (head: string, model: string, shard: string): string =>
  JSON.stringify({ head, model, shard });

/**
 * The head shard's links to its pipeline stages: on each stage Worker (bound STAGE_1 .. STAGE_N), the stage
 * object named for the head, its model and the shard. A stub is made per call, as Cloudflare advises after a
 * failed call (a broken stub stays broken); the object behind the name is the same.
 */
export function stageLinks(env: Env, stages: number, shard: string): StageLink[] {
  const name = stageObjectName(env.PIPELINE_HEAD?.trim() ?? '', modelName(env), shard);
  return Array.from({ length: stages }, (_, i) => {
    const binding = `STAGE_${i + 1}` as const;
    const namespace = (env as unknown as StageBindings)[binding];
    if (!namespace)
      throw new InvalidRequestError(
        'PIPELINE_STAGES',
        `PIPELINE_STAGES=${stages} but ${binding} is not bound: run with npm start (it generates the stage Workers' configs) or deploy with npm run deploy`,
        'unsupported_model',
      );
    const stub = () => namespace.get(namespace.idFromName(name));
    const refused = (r: { param: string; message: string; code: string }, what: string): never => {
      throw new InvalidRequestError(r.param, `pipeline stage ${i + 1}${what}: ${r.message}`, r.code);
    };
    return {
      open: async (open) => {
        const opened = await stub().open(open);
        if ('refused' in opened) refused(opened.refused, ` (layers ${open.span.from}..${open.span.to - 1})`);
        return opened as StageInfo;
      },
      adapter: async (read) => {
        const reply = await stub().adapter(read);
        if ('refused' in reply) refused(reply.refused, '');
        return reply as { lost: boolean };
      },
      step: (step) => stub().step(step),
      read: (read) => stub().read(read),
      ends: (ends) => stub().ends(ends),
      epoch: () => stub().epoch(),
      close: (epoch) => stub().close(epoch),
    };
  });
}
