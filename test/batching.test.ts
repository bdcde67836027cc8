// Continuous batching over the paged cache: many requests stepped together (arriving at different
// steps, some cancelled, some preempted, long prompts chunked) give exactly what each gives alone.
import { beforeAll, describe, expect, it } from 'vitest';
import type { Engine, EngineOptions } from '../src/engine/engine.js';
import { CapacityError } from '../src/engine/errors.js';
import type { GenerationRequest } from '../src/engine/request.js';
import type { DoneEvent } from '../src/engine/sequence-output.js';
import { runArrivals, type Arrival } from './helpers/arrivals.js';
import { collect, loadEngine, maxAbsDiff, randomIds, SUITE_BACKEND } from './helpers/engines.js';

let alone: Engine;
const aloneCache = new Map<string, number[]>();
async function runAlone(request: GenerationRequest): Promise<number[]> {
  const key = JSON.stringify(request);
  if (!aloneCache.has(key)) aloneCache.set(key, (await collect(alone, request)).done.tokenIds);
  return aloneCache.get(key)!;
}

const manual = (options: EngineOptions = {}): Promise<Engine> =>
  loadEngine(SUITE_BACKEND, 'tiny', { autoRun: false, ...options });

beforeAll(async () => {
  alone = await loadEngine(SUITE_BACKEND);
});

function mixedArrivals(sampled: boolean): Arrival[] {
  return Array.from({ length: 10 }, (_, i) => ({
    request: {
      prompt_ids: randomIds(100 + i, 3 + ((i * 7) % 40), 3, 512),
      max_tokens: 4 + ((i * 5) % 23),
      ignore_eos: i % 3 !== 0,
      ...(sampled ? { temperature: 0.9, top_p: 0.95, seed: 1000 + i } : { temperature: 0 }),
    },
    at: [0, 0, 1, 2, 2, 3, 5, 8, 9, 13][i],
    cancelAt: i === 4 ? 6 : i === 7 ? 10 : undefined,
  }));
}

describe('continuous batching equals each request alone', () => {
  for (const sampled of [false, true]) {
    it(`${sampled ? 'seeded sampling' : 'greedy'}: 10 requests arriving at different steps, two cancelled`, async () => {
      const engine = await manual();
      const arrivals = mixedArrivals(sampled);
      let widest = 0;
      const results = await runArrivals(
        engine,
        arrivals,
        () => (widest = Math.max(widest, engine.stats().lastBatchSize)),
      );
      for (const [i, { done }] of results.entries()) {
        const expected = await runAlone(arrivals[i].request);
        if (arrivals[i].cancelAt !== undefined) {
          expect(done.finishReason, `request ${i}`).toBe('cancelled');
          expect(expected.slice(0, done.tokenIds.length), `request ${i} is a prefix of its solo run`).toEqual(
            done.tokenIds,
          );
          expect(done.tokenIds.length).toBeLessThan(expected.length);
        } else {
          expect(done.tokenIds, `request ${i}`).toEqual(expected);
        }
      }
      expect(widest, 'requests really ran in one batch').toBeGreaterThanOrEqual(5);
      expect(engine.stats().kv.used).toBe(0);
      engine.kv.pool.checkInvariants();
    });
  }

  it('finished requests leave at once and a waiting one takes the slot at the next step', async () => {
    const engine = await manual({ maxBatchSize: 2 });
    const req = (i: number, max: number): GenerationRequest => ({
      prompt_ids: randomIds(i, 5, 3, 512),
      max_tokens: max,
      temperature: 0,
      ignore_eos: true,
    });
    const running: number[] = [];
    const results = await runArrivals(
      engine,
      [
        { request: req(1, 3), at: 0 },
        { request: req(2, 10), at: 0 },
        { request: req(3, 4), at: 0 },
      ],
      () => running.push(engine.stats().lastBatchSize),
    );
    // Step 0 prefills two and samples their first token; the first finishes after its 3rd token (step 2),
    // and the third request is admitted at step 3.
    expect(running.slice(0, 4)).toEqual([2, 2, 2, 2]);
    expect(results[2].done.tokenIds).toEqual(await runAlone(req(3, 4)));
  });
});

describe('preemption by recompute', () => {
  it('when the pool runs dry the newest sequence gives its blocks back and its output does not change', async () => {
    // 10 blocks of 4 tokens; four requests that each need up to 8 blocks cannot all stay resident.
    const bytesPerBlock = 4 * 512; // tiny: 512 bytes of KV per token
    const engine = await manual({ blockSize: 4, kvCacheBytes: 10 * bytesPerBlock });
    const arrivals: Arrival[] = Array.from({ length: 4 }, (_, i) => ({
      request: {
        prompt_ids: randomIds(300 + i, 6 + i, 3, 512),
        max_tokens: 22,
        temperature: i % 2 ? 0.8 : 0,
        seed: i,
        ignore_eos: true,
      },
      at: i,
    }));
    const results = await runArrivals(engine, arrivals);
    expect(engine.stats().preemptions).toBeGreaterThan(0);
    for (const [i, { done }] of results.entries())
      expect(done.tokenIds, `request ${i}`).toEqual(await runAlone(arrivals[i].request));
    expect(engine.stats().kv.used).toBe(0);
    engine.kv.pool.checkInvariants();
  });

  it('refuses up front a request that could never fit the pool', async () => {
    const engine = await manual({ blockSize: 4, kvCacheBytes: 10 * 4 * 512 });
    const before = engine.stats();
    expect(() => engine.generate({ prompt_ids: randomIds(1, 30, 3, 512), max_tokens: 20 })).toThrow(CapacityError);
    expect(engine.stats()).toEqual(before);
  });
});

describe('chunked prefill', () => {
  it('a long prompt is prefilled in chunks while a running decode keeps producing tokens', async () => {
    const engine = await manual({ maxTokensPerStep: 16 });
    const decode: GenerationRequest = {
      prompt_ids: randomIds(5, 4, 3, 512),
      max_tokens: 30,
      temperature: 0,
      ignore_eos: true,
    };
    const long: GenerationRequest = {
      prompt_ids: randomIds(6, 120, 3, 512),
      max_tokens: 5,
      temperature: 0,
      ignore_eos: true,
    };
    const tokensPerStep: number[] = [];
    const results = await runArrivals(
      engine,
      [
        { request: decode, at: 0 },
        { request: long, at: 2 },
      ],
      () => tokensPerStep.push(engine.stats().lastStepTokens),
    );
    expect(Math.max(...tokensPerStep)).toBeLessThanOrEqual(16);
    // While the 120-token prompt is prefilled (>= 8 steps of <= 15 tokens), the decode gets a token every step.
    const decodeDone = results[0].done;
    expect(decodeDone.tokenIds).toEqual(await runAlone(decode));
    expect(results[1].done.tokenIds).toEqual(await runAlone(long));
    expect(tokensPerStep.length).toBeLessThan(30 + 2); // the decode never waited a step
  });
});

describe('prefix caching', () => {
  it('a second request sharing a 200-token prefix prefills only its suffix', async () => {
    const engine = await loadEngine(SUITE_BACKEND);
    const prefix = randomIds(77, 200, 3, 512);
    const first = await collect(engine, { prompt_ids: [...prefix, 10, 11, 12], max_tokens: 4, temperature: 0 });
    expect(first.done.metrics.cachedTokens).toBe(0);
    const before = engine.stats();
    const second = await collect(engine, {
      prompt_ids: [...prefix, 20, 21],
      max_tokens: 4,
      temperature: 0,
      ignore_eos: true,
    });
    const after = engine.stats();
    const reused = Math.floor(200 / 16) * 16; // full 16-token blocks of the shared prefix
    expect(second.done.metrics.cachedTokens).toBe(reused);
    expect(after.prefixHitTokens - before.prefixHitTokens).toBe(reused);
    expect(after.prefillTokens - before.prefillTokens).toBe(202 - reused);
    expect(second.done.tokenIds).toEqual(
      await runAlone({ prompt_ids: [...prefix, 20, 21], max_tokens: 4, temperature: 0, ignore_eos: true }),
    );
  });

  it('logits after cache reuse equal those of a fresh prefill', async () => {
    const engine = await loadEngine(SUITE_BACKEND);
    const prompt = randomIds(78, 70, 3, 512);
    const fresh = engine.kv.create();
    engine.kv.reserve(fresh, prompt.length);
    const freshLogits = Array.from((await engine.runner.forward([{ kv: fresh, tokens: prompt }])).last(0));
    engine.kv.commit(fresh, prompt);
    engine.kv.free(fresh); // its full blocks stay cached, idle
    const reused = engine.kv.create();
    const hit = engine.kv.matchPrefix(reused, prompt);
    expect(hit).toBe(64);
    engine.kv.reserve(reused, prompt.length - hit);
    const reusedLogits = (await engine.runner.forward([{ kv: reused, tokens: prompt.slice(hit) }])).last(0);
    expect(maxAbsDiff(reusedLogits, freshLogits)).toBeLessThan(1e-4);
    engine.kv.free(reused);
  });
});

describe('sessions keep their cache between turns', () => {
  it('a turn that extends the previous one prefills only the new tokens', async () => {
    const engine = await loadEngine(SUITE_BACKEND);
    const turn1 = randomIds(90, 21, 3, 512);
    const first = await collect(
      engine,
      { prompt_ids: turn1, max_tokens: 6, temperature: 0, ignore_eos: true },
      undefined,
      's1',
    );
    expect(engine.stats().pinnedSessions).toBe(1);
    const turn2 = [...turn1, ...first.done.tokenIds, 30, 31, 32];
    const second = await collect(
      engine,
      { prompt_ids: turn2, max_tokens: 6, temperature: 0, ignore_eos: true },
      undefined,
      's1',
    );
    // Everything but the last generated token (sampled, never fed) came from the session's cache.
    expect(second.done.metrics.cachedTokens).toBe(turn1.length + first.done.tokenIds.length - 1);
    expect(second.done.tokenIds).toEqual(
      await runAlone({ prompt_ids: turn2, max_tokens: 6, temperature: 0, ignore_eos: true }),
    );
    engine.releaseSession('s1');
    expect(engine.stats().pinnedSessions).toBe(0);
    expect(engine.stats().kv.used).toBe(0);
  });
});

describe('n > 1: one prefill, copy-on-write forks', () => {
  it('each of n completions equals a solo run with seed + index, and the prompt is prefilled once', async () => {
    const engine = await loadEngine(SUITE_BACKEND);
    const prompt = randomIds(91, 37, 3, 512); // 2 full blocks + a partial one that the forks copy on write
    const before = engine.stats();
    const tokens: number[][] = [[], [], []];
    const dones: DoneEvent[] = [];
    for await (const event of engine.generate({
      prompt_ids: prompt,
      n: 3,
      max_tokens: 12,
      temperature: 0.9,
      seed: 40,
      ignore_eos: true,
    })) {
      if (event.type === 'token') tokens[event.index].push(event.tokenId);
      else dones[event.index] = event;
    }
    const after = engine.stats();
    for (let i = 0; i < 3; i++) {
      const solo = await runAlone({
        prompt_ids: prompt,
        max_tokens: 12,
        temperature: 0.9,
        seed: 40 + i,
        ignore_eos: true,
      });
      expect(dones[i].tokenIds, `completion ${i}`).toEqual(solo);
      expect(tokens[i]).toEqual(solo);
    }
    expect(after.prefillTokens - before.prefillTokens).toBe(prompt.length);
    expect(after.copyOnWrites - before.copyOnWrites).toBe(2);
    expect(after.kv.used).toBe(0);
  });

  it('cancelling the stream cancels every completion', async () => {
    const engine = await loadEngine(SUITE_BACKEND);
    const dones: DoneEvent[] = [];
    const controller = new AbortController();
    let seen = 0;
    for await (const event of engine.generate(
      { prompt: 'fork me', n: 2, max_tokens: 100, temperature: 0, ignore_eos: true },
      { signal: controller.signal },
    )) {
      if (event.type === 'token' && ++seen === 4) controller.abort();
      if (event.type === 'done') dones.push(event);
    }
    expect(dones.map((d) => d.finishReason)).toEqual(['cancelled', 'cancelled']);
    expect(engine.stats().kv.used).toBe(0);
  });
});

describe('session caches under memory pressure', () => {
  it('queued session turns hold no blocks, so a request that needs the whole pool still runs (no livelock)', async () => {
    const engine = await manual({ blockSize: 4, kvCacheBytes: 8 * 4 * 512 }); // 8 blocks of 4 tokens
    const turn = (seed: number): GenerationRequest => ({
      prompt_ids: randomIds(seed, 9, 3, 512),
      max_tokens: 3,
      temperature: 0,
      ignore_eos: true,
    });
    // Two sessions finish a turn and keep 3 blocks each.
    const logs: number[][] = [];
    for (const [i, s] of ['a', 'b'].entries()) {
      const done = collect(engine, turn(i), undefined, s);
      while (engine.busy) await engine.step();
      const { done: first } = await done;
      logs.push([...first.promptIds, ...first.tokenIds, 40, 41]); // the next turn extends the last one
    }
    expect(engine.stats().kv.used).toBe(6);
    // A request that needs all 8 blocks arrives first, then both sessions' next turns queue behind it.
    const big: GenerationRequest = {
      prompt_ids: randomIds(7, 28, 3, 512),
      max_tokens: 4,
      temperature: 0,
      ignore_eos: true,
    };
    const next = (i: number): GenerationRequest => ({
      prompt_ids: logs[i],
      max_tokens: 3,
      temperature: 0,
      ignore_eos: true,
    });
    const results = [
      collect(engine, big),
      collect(engine, next(0), undefined, 'a'),
      collect(engine, next(1), undefined, 'b'),
    ];
    for (let step = 0; engine.busy; step++) {
      expect(step, 'the engine makes progress').toBeLessThan(200);
      await engine.step();
      await new Promise((resolve) => setImmediate(resolve));
    }
    const [bigDone] = await Promise.all(results);
    expect(bigDone.done.tokenIds).toEqual(await runAlone(big));
    engine.kv.pool.checkInvariants();
  });

  it('a session cancelled during its last pass does not keep its cache', async () => {
    const engine = await manual();
    const controller = new AbortController();
    const result = collect(
      engine,
      { prompt_ids: [5, 6, 7], max_tokens: 2, temperature: 0, ignore_eos: true },
      controller.signal,
      's',
    );
    await engine.step(); // prefill + first token
    const last = engine.step(); // the pass that samples the last token...
    controller.abort(); // ...during which the session is deleted
    await last;
    while (engine.busy) await engine.step();
    await result;
    expect(engine.stats().pinnedSessions).toBe(0);
    expect(engine.sessionCachedTokens('s')).toBe(0);
    expect(engine.stats().kv.used).toBe(0);
  });
});
