// Fair admission: the scheduler admits waiting requests round-robin across fairness groups (first come,
// first served within one), so a burst of 48 from group A leaves B's requests waiting for at most one of
// A's admissions each, where first come, first served would have them wait for all 48.
import { beforeAll, describe, expect, it } from 'vitest';
import type { Engine } from '../src/engine/engine.js';
import { BlockPool } from '../src/engine/kv/block-pool.js';
import { KvCacheManager, type PagedSequenceKv } from '../src/engine/kv/paged-kv.js';
import { Scheduler } from '../src/engine/scheduler.js';
import type { GenerationRequest } from '../src/engine/request.js';
import { loadEngine, randomIds } from './helpers/engines.js';

const BATCH = 4;

const request = (seed: number, maxTokens = 6): GenerationRequest => ({
  prompt_ids: randomIds(seed, 5, 3, 512),
  max_tokens: maxTokens,
  temperature: 0,
  ignore_eos: true,
});

interface Submitted {
  label: string;
  group: string | undefined;
  arrivedAt: number;
  firstTokenAt?: number;
  tokenIds?: number[];
}

/**
 * Steps a manual engine: `arrivals(step)` submits what arrives before that step. Returns every request with
 * the step it arrived and the step its first token came out of (prompts are one chunk, so that is its
 * admission), and the order in which requests were admitted.
 */
async function run(
  engine: Engine,
  arrivals: (step: number) => { label: string; request: GenerationRequest; group?: string }[],
  lastArrival: number,
): Promise<{ all: Submitted[]; order: string[] }> {
  const all: Submitted[] = [];
  const order: string[] = [];
  const pending: Promise<void>[] = [];
  let step = 0;
  for (; step <= lastArrival || engine.busy; step++) {
    for (const { label, request, group } of arrivals(step)) {
      const entry: Submitted = { label, group, arrivedAt: step };
      all.push(entry);
      pending.push(
        (async () => {
          const ids: number[] = [];
          for await (const event of engine.generate(request, { fairnessGroup: group })) {
            if (event.type !== 'token') continue;
            if (entry.firstTokenAt === undefined) {
              entry.firstTokenAt = step;
              order.push(label);
            }
            ids.push(event.tokenId);
          }
          entry.tokenIds = ids;
        })(),
      );
    }
    await engine.step();
    await new Promise((resolve) => setImmediate(resolve));
    if (step > 10_000) throw new Error('engine did not finish');
  }
  await Promise.all(pending);
  return { all, order };
}

/** What a request gives with the engine to itself. */
async function alone(on: Engine, req: GenerationRequest): Promise<number[]> {
  const { all } = await run(on, (step) => (step === 0 ? [{ label: 'alone', request: req }] : []), 0);
  return all[0].tokenIds!;
}

let engine: Engine;
beforeAll(async () => {
  engine = await loadEngine('cpu', 'tiny', { autoRun: false, maxBatchSize: BATCH });
});

describe('fair admission across groups', () => {
  it('a burst of 48 from A: B, arriving behind all of it, is admitted in the first batch', async () => {
    const { all, order } = await run(
      engine,
      (step) =>
        step === 0
          ? [
              ...Array.from({ length: 48 }, (_, i) => ({ label: `A${i}`, request: request(i), group: 'A' })),
              ...Array.from({ length: 3 }, (_, i) => ({ label: `B${i}`, request: request(100 + i), group: 'B' })),
            ]
          : [],
      0,
    );
    // Round-robin from the first admission: A0 B0 A1 B1 fill the batch of 4, B2 takes the next free slot.
    expect(order.slice(0, 5)).toEqual(['A0', 'B0', 'A1', 'B1', 'A2']);
    expect(order.indexOf('B2')).toBe(5);
    // Within a group, first come first served.
    const aOrder = order.filter((l) => l.startsWith('A'));
    expect(aOrder).toEqual(Array.from({ length: 48 }, (_, i) => `A${i}`));
    // Every request still generated all its tokens, B's exactly what they give alone.
    expect(all.every((r) => r.tokenIds?.length === 6)).toBe(true);
    expect(all.find((r) => r.label === 'B0')!.tokenIds).toEqual(await alone(engine, request(100)));
  });

  it('B arriving mid-burst waits for at most one of A admissions; without groups it waits for the whole queue', async () => {
    const arrivals = (grouped: boolean) => (step: number) => {
      const group = (g: string) => (grouped ? g : undefined);
      if (step === 0)
        return Array.from({ length: 48 }, (_, i) => ({ label: `A${i}`, request: request(i), group: group('A') }));
      if (step === 9 || step === 23) return [{ label: `B${step}`, request: request(200 + step), group: group('B') }];
      return [];
    };
    const fair = await run(engine, arrivals(true), 23);
    const fcfs = await run(engine, arrivals(false), 23);
    for (const label of ['B9', 'B23']) {
      const b = fair.all.find((r) => r.label === label)!;
      const admittedBefore = fair.order.indexOf(label);
      // Admissions of A between B's arrival and its own: at most one (two groups take turns).
      const othersFirst = fair.order
        .slice(0, admittedBefore)
        .filter((l) => fair.all.find((r) => r.label === l)!.firstTokenAt! >= b.arrivedAt).length;
      expect(othersFirst, `${label}: A admitted ahead of it`).toBeLessThanOrEqual(1);
      // Its wait is the time until a batch slot frees: at most one request's length (6 tokens) plus a step.
      expect(b.firstTokenAt! - b.arrivedAt, `${label}: steps waited`).toBeLessThanOrEqual(6);
      const queued = fcfs.all.find((r) => r.label === label)!;
      expect(queued.firstTokenAt! - queued.arrivedAt, `${label} without groups`).toBeGreaterThan(20);
    }
  });

  it('a preempted sequence goes back ahead of every group, and the pool ends empty', async () => {
    // 12 blocks of 4 tokens, 4 sequences that each grow to 5-6 blocks: some are preempted and recomputed.
    const small = await loadEngine('cpu', 'tiny', {
      autoRun: false,
      maxBatchSize: BATCH,
      blockSize: 4,
      kvCacheBytes: 12 * 4 * 512,
    });
    const { all } = await run(
      small,
      (step) =>
        step === 0
          ? Array.from({ length: 6 }, (_, i) => ({
              label: `${i % 2 ? 'A' : 'B'}${i}`,
              request: request(300 + i, 16),
              group: i % 2 ? 'A' : 'B',
            }))
          : [],
      0,
    );
    expect(small.stats().preemptions).toBeGreaterThan(0);
    for (const r of all) {
      expect(r.tokenIds, r.label).toEqual(await alone(small, request(300 + Number(r.label.slice(1)), 16)));
    }
    expect(small.stats().kv.used).toBe(0);
    small.kv.pool.checkInvariants();
  });
});

describe('the scheduler on its own', () => {
  interface Seq {
    id: number;
    label: string;
    tokens: number[];
    kv: PagedSequenceKv;
    fairnessGroup: string;
    /** Tokens at which it finishes. */
    end: number;
  }

  it('a preempted sequence is readmitted before another group whose turn it would be', () => {
    // 5 blocks of 4 tokens, 2 in a batch: a0 and b0 both grow to 3 blocks, so b0 (the newer) is preempted.
    const shape = { numLayers: 1, numKvHeads: 1, headDim: 1 };
    const kv = new KvCacheManager(new BlockPool(shape, 5, 4), 'm');
    const scheduler = new Scheduler<Seq>(kv, { maxBatchSize: 2, maxTokensPerStep: 64 });
    let id = 0;
    const seq = (label: string, end: number): Seq => ({
      id: id++,
      label,
      tokens: Array.from({ length: 7 }, (_, i) => i + 3 + 10 * id),
      kv: kv.create(),
      fairnessGroup: label[0],
      end,
    });
    for (const s of [seq('a0', 12), seq('b0', 12), seq('a1', 8), seq('b1', 8)]) scheduler.add(s);
    const admitted: string[] = [];
    const preempted: string[] = [];
    for (let step = 0; scheduler.hasWork && step < 200; step++) {
      const plan = scheduler.schedule();
      admitted.push(...plan.admitted.map((a) => a.seq.label));
      preempted.push(...plan.preempted.map((s) => s.label));
      for (const row of plan.rows) {
        row.seq.kv.advance(row.tokens.length);
        if (!row.samples) continue;
        row.seq.tokens.push(1);
        if (row.seq.tokens.length >= row.seq.end) scheduler.remove(row.seq);
      }
    }
    expect(preempted).toEqual(['b0']);
    // Round-robin gives a0 b0 first; b0, preempted, comes back before a1 (whose group's turn it was).
    expect(admitted).toEqual(['a0', 'b0', 'b0', 'a1', 'b1']);
    expect(kv.pool.stats().free + kv.pool.stats().cachedIdle).toBe(5);
  });
});
