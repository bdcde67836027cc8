// A request fails alone: a sequence that throws in a running batch of 8 (its grammar dead-ends, or its
// row of the model pass faults) ends with its own error, and the 7 others finish with exactly the tokens
// they give alone. A grammar that admits no text at all is refused when compiled.
import { beforeAll, describe, expect, it } from 'vitest';
import type { Engine } from '../src/engine/engine.js';
import { InvalidRequestError, SequenceFailedError } from '../src/engine/errors.js';
import type { GenerationRequest } from '../src/engine/request.js';
import type { DoneEvent } from '../src/engine/sequence-output.js';
import { collect, loadEngine, randomIds, SUITE_BACKEND } from './helpers/engines.js';

const BATCH = 8;
const FAULTY = 3;

let alone: Engine;
beforeAll(async () => {
  alone = await loadEngine(SUITE_BACKEND);
});

const requests = (): GenerationRequest[] =>
  Array.from({ length: BATCH }, (_, i) => ({
    prompt_ids: randomIds(700 + i, 4 + ((i * 5) % 21), 3, 512),
    max_tokens: 12 + ((i * 3) % 9),
    ignore_eos: true,
    ...(i % 2 === 0 ? { temperature: 0 } : { temperature: 0.9, top_p: 0.95, seed: 40 + i }),
  }));

/** Steps a manual engine with every request submitted at once, until none is left; each settles on its own. */
async function runBatch(
  engine: Engine,
  batch: GenerationRequest[],
): Promise<{ results: PromiseSettledResult<DoneEvent>[]; widest: number }> {
  // Settled as they go: a request's failure is an outcome to check, not an unhandled rejection.
  const settled = Promise.allSettled(batch.map((request) => collect(engine, request).then((r) => r.done)));
  let widest = 0;
  for (let step = 0; engine.busy; step++) {
    await engine.step();
    widest = Math.max(widest, engine.stats().lastBatchSize);
    await new Promise((resolve) => setImmediate(resolve));
    if (step > 5_000) throw new Error('engine did not finish');
  }
  return { results: await settled, widest };
}

async function expectOthersAsAlone(results: PromiseSettledResult<DoneEvent>[], batch: GenerationRequest[]) {
  for (const [i, result] of results.entries()) {
    if (i === FAULTY) continue;
    expect(result.status, `request ${i}`).toBe('fulfilled');
    const done = (result as PromiseFulfilledResult<DoneEvent>).value;
    expect(done.finishReason, `request ${i}`).toBe('length');
    expect(done.tokenIds, `request ${i} as alone`).toEqual((await collect(alone, batch[i])).done.tokenIds);
  }
}

describe('one sequence fails alone', () => {
  it('a grammar that dead-ends after its first token fails its request; 7 others finish as alone', async () => {
    const engine = await loadEngine(SUITE_BACKEND, 'tiny', { autoRun: false });
    const batch = requests();
    // "a" is allowed first; after it the rule x (left-recursive, no base case) allows nothing.
    batch[FAULTY] = {
      ...batch[FAULTY],
      constraint: { spec: { type: 'grammar', ebnf: 'root ::= "a" x\nx ::= x "b"' }, param: 'guided_grammar' },
    };
    const { results, widest } = await runBatch(engine, batch);
    expect(widest, 'the faulty request ran inside the batch').toBe(BATCH);
    const failed = results[FAULTY];
    expect(failed.status).toBe('rejected');
    const reason = (failed as PromiseRejectedResult).reason as SequenceFailedError;
    expect(reason).toBeInstanceOf(SequenceFailedError);
    expect(reason.code).toBe('grammar_dead_end');
    await expectOthersAsAlone(results, batch);
    expect(engine.stats().kv.used, 'every block came back').toBe(0);
    engine.kv.pool.checkInvariants();
  });

  it('a model pass that throws on one row: that row is found alone and fails; 7 others finish as alone', async () => {
    const engine = await loadEngine(SUITE_BACKEND, 'tiny', { autoRun: false });
    const batch = requests();
    const poison = 2; // below every id randomIds draws (3..511)
    batch[FAULTY] = { ...batch[FAULTY], prompt_ids: [...(batch[FAULTY].prompt_ids ?? []), poison] };
    for (const [i, r] of batch.entries()) if (i !== FAULTY) expect(r.prompt_ids).not.toContain(poison);
    // The fault: the real runner, refusing any pass that feeds the poison token (as a runner would fault
    // on one row's inputs), while every other pass runs as usual.
    const runner = engine.runner;
    const forward = runner.forward.bind(runner);
    let faults = 0;
    runner.forward = async (rows) => {
      if (rows.some((row) => row.tokens.includes(poison))) {
        faults++;
        throw new Error('injected fault in one row');
      }
      return forward(rows);
    };
    const { results } = await runBatch(engine, batch);
    expect(faults, 'the batched pass failed, then the row alone').toBe(2);
    const failed = results[FAULTY];
    expect(failed.status).toBe('rejected');
    const reason = (failed as PromiseRejectedResult).reason as SequenceFailedError;
    expect(reason).toBeInstanceOf(SequenceFailedError);
    expect(reason.message).toContain('injected fault in one row');
    await expectOthersAsAlone(results, batch);
    expect(engine.stats().kv.used).toBe(0);
    engine.kv.pool.checkInvariants();
  });

  it('n = 3 siblings: the group fails together and the batch beside it goes on', async () => {
    const engine = await loadEngine(SUITE_BACKEND, 'tiny', { autoRun: false });
    const batch = requests();
    batch[FAULTY] = {
      ...batch[FAULTY],
      n: 3,
      constraint: { spec: { type: 'grammar', ebnf: 'root ::= "a" x\nx ::= x "b"' }, param: 'guided_grammar' },
    };
    const { results } = await runBatch(engine, batch);
    expect(results[FAULTY].status).toBe('rejected');
    await expectOthersAsAlone(results, batch);
    expect(engine.stats().kv.used).toBe(0);
    engine.kv.pool.checkInvariants();
  });
});

describe('grammars whose language is empty are refused when compiled', () => {
  for (const [name, spec] of [
    ['a schema that is only a $ref to itself', { type: 'json_schema', schema: { $ref: '#' } }],
    ['an EBNF root that only refers to itself', { type: 'grammar', ebnf: 'root ::= root' }],
  ] as const) {
    it(name, () => {
      let thrown: unknown;
      try {
        alone.generate({ prompt: 'x', constraint: { spec: spec as never, param: 'response_format' } });
      } catch (err) {
        thrown = err;
      }
      expect(thrown).toBeInstanceOf(InvalidRequestError);
      expect((thrown as InvalidRequestError).code).toBe('empty_grammar');
      expect((thrown as InvalidRequestError).param).toBe('response_format');
      expect(alone.busy).toBe(false);
    });
  }
});
