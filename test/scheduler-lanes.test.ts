// The scheduler with several lanes (a runner that keeps a pass in flight per pipeline stage), on its own:
// each lane admits into an even share of the batch and schedules only its own sequences; a cohort (a beam
// search's beams) stays in one lane; a lane's preemption takes only that lane's sequences; and a sequence a
// lane holds never appears in another lane's step.
import { describe, expect, it } from 'vitest';
import { BlockPool } from '../src/engine/kv/block-pool.js';
import { KvCacheManager, type PagedSequenceKv } from '../src/engine/kv/paged-kv.js';
import { Scheduler } from '../src/engine/scheduler.js';

interface Seq {
  id: number;
  label: string;
  tokens: number[];
  kv: PagedSequenceKv;
  cohort?: object;
}

const SHAPE = { numLayers: 1, numKvHeads: 1, headDim: 1 };

function setup(blocks: number, maxBatchSize: number, lanes: number) {
  const kv = new KvCacheManager(new BlockPool(SHAPE, blocks, 4), 'm');
  const scheduler = new Scheduler<Seq>(kv, { maxBatchSize, maxTokensPerStep: 256, lanes }, undefined, undefined, {
    lookahead: () => 0,
    cohort: (s) => s.cohort,
    skipsPrefixCache: () => false,
  });
  let n = 0;
  const seq = (label: string, length = 5, cohort?: object): Seq => {
    n++;
    return { id: n, label, tokens: Array.from({ length }, (_, i) => 100 * n + i), kv: kv.create(), cohort };
  };
  /** Runs one lane's step as the engine would: the pass computes its rows, each row that samples gets a token. */
  const step = (lane: number) => {
    const plan = scheduler.schedule(lane);
    for (const row of plan.rows) {
      row.seq.kv.advance(row.tokens.length);
      if (row.samples) row.seq.tokens.push(7);
    }
    return plan;
  };
  return { kv, scheduler, seq, step };
}

const labels = (rows: readonly { seq: Seq }[]): string[] => rows.map((r) => r.seq.label).sort();

describe('scheduler lanes', () => {
  it('each lane admits its even share of the batch and steps only its own sequences', () => {
    const { scheduler, seq, step } = setup(64, 4, 2);
    for (const s of ['a', 'b', 'c', 'd', 'e'].map((l) => seq(l))) scheduler.add(s);
    const first = step(0);
    expect(labels(first.rows)).toEqual(['a', 'b']); // ceil(4 / 2) = 2 per lane
    const second = step(1);
    expect(labels(second.rows)).toEqual(['c', 'd']);
    // Lane 0 again: its own two decode; e waits, since every lane holds its share.
    expect(labels(step(0).rows)).toEqual(['a', 'b']);
    expect(labels(step(1).rows)).toEqual(['c', 'd']);
    expect(scheduler.waiting.map((s) => s.label)).toEqual(['e']);
    for (const s of scheduler.running) expect(scheduler.lane(s), s.label).toBe(['a', 'b'].includes(s.label) ? 0 : 1);
    // A sequence of lane 1 finishing frees a place there, not in lane 0.
    scheduler.remove(scheduler.running.find((s) => s.label === 'c')!);
    expect(labels(step(0).rows)).toEqual(['a', 'b']);
    expect(labels(step(1).rows)).toEqual(['d', 'e']);
  });

  it('a cohort stays in the lane its first member runs in; a fork is adopted into its cohort lane', () => {
    const { scheduler, seq, step, kv } = setup(64, 8, 2);
    const beams = {};
    const b0 = seq('b0', 5, beams);
    scheduler.add(seq('x'));
    scheduler.add(b0);
    step(0);
    step(1);
    const lane = scheduler.lane(b0);
    const b1: Seq = { id: 99, label: 'b1', tokens: [...b0.tokens], kv: kv.fork(b0.kv), cohort: beams };
    scheduler.adopt(b1);
    expect(scheduler.lane(b1)).toBe(lane);
    expect(labels(step(lane).rows)).toContain('b1');
    expect(labels(step(1 - lane).rows)).not.toContain('b1');
  });

  it("a lane short of blocks preempts only its own sequences, never one in another lane's pass", () => {
    // 8 blocks of 4 tokens; each sequence grows until the pool runs out.
    const { scheduler, seq, step, kv } = setup(8, 4, 2);
    for (const s of ['a', 'b', 'c', 'd'].map((l) => seq(l, 4))) scheduler.add(s);
    step(0);
    step(1);
    const laneOf = new Map(scheduler.running.map((s) => [s.label, scheduler.lane(s)]));
    const preempted: { label: string; lane: number }[] = [];
    for (let i = 0; i < 12; i++)
      for (const lane of [0, 1]) {
        const plan = step(lane);
        preempted.push(...plan.preempted.map((s) => ({ label: s.label, lane })));
        // Every row is the lane's own.
        for (const row of plan.rows) expect(laneOf.get(row.seq.label) ?? lane, row.seq.label).toBe(lane);
        for (const s of scheduler.running) laneOf.set(s.label, scheduler.lane(s));
      }
    expect(preempted.length).toBeGreaterThan(0);
    for (const p of preempted) expect(p.lane, `${p.label} preempted by its own lane`).toBe(laneOf.get(p.label));
    kv.pool.checkInvariants();
  });
});
