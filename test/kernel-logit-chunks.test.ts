// A quantised output projection computes a pass's logits a chunk of rows at a time, as they are read
// (scratch-layout.ts, logitChunkRows): whatever order the rows are read in, with other positions asked for
// between, each row's logits are the bits it gets alone, and the scratch holds one chunk of rows.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Engine } from '../src/engine/engine.js';
import type { PagedSequenceKv } from '../src/engine/kv/paged-kv.js';
import { KernelRunner } from '../src/engine/runners/wasm/kernel-runner.js';
import { CHUNK, logitChunkRows, passLayout, QUANT_LOGIT_CHUNK } from '../src/engine/runners/wasm/scratch-layout.js';
import { loadEngine, randomIds } from './helpers/engines.js';

const bits = (a: Float32Array): string => Buffer.from(a.buffer, a.byteOffset, a.byteLength).toString('base64');

describe.each(['q4', 'int8'] as const)('logits in chunks of rows, %s', (dtype) => {
  let engine: Engine;
  let runner: KernelRunner;
  beforeAll(async () => {
    engine = await loadEngine('kernels', 'tiny', { autoRun: false, blockSize: 4, dtype });
    runner = engine.runner as KernelRunner;
    expect(runner).toBeInstanceOf(KernelRunner);
  });
  afterAll(() => engine.runner.release());

  /** One pass of `prompts` (each fresh, wanting its last `want` positions' logits); `read` takes what it keeps. */
  async function pass<T>(
    prompts: number[][],
    want: number[],
    read: (logits: Awaited<ReturnType<Engine['runner']['forward']>>) => T,
  ) {
    const kvs: PagedSequenceKv[] = prompts.map(() => engine.kv.create());
    try {
      const rows = prompts.map((tokens, i) => {
        expect(engine.kv.reserve(kvs[i], tokens.length)).toBe(true);
        return { kv: kvs[i], tokens, logits: want[i] };
      });
      return read(await engine.runner.forward(rows));
    } finally {
      for (const kv of kvs) engine.kv.free(kv);
    }
  }

  it('holds one chunk of rows in scratch, not the batch', () => {
    const head = runner.weights.ends!.lmHead;
    // The test means nothing unless the head is quantised: that is the chunked path.
    expect(head.kind).toBe('quant');
    expect(logitChunkRows(runner.weights, 24)).toBe(QUANT_LOGIT_CHUNK);
    const shape = { tokens: 24, tableEntries: 24, scoreRow: CHUNK * 40, logitRows: 24 };
    const layout = passLayout(runner.config, shape, runner.weights);
    expect(layout.logits).toBe(QUANT_LOGIT_CHUNK * head.n * 4);
  });

  it("gives every row's logits the bits it gets alone, read in any order with other positions between", async () => {
    const prompts = Array.from({ length: 11 }, (_, i) =>
      randomIds(40 + i, 3 + ((i * 5) % 9), 3, engine.samplableVocab),
    );
    // Rows wanting 3 positions (as a speculative verification does) put chunk edges inside rows.
    const want = prompts.map((_, i) => (i % 3 === 1 ? 3 : 1));
    const alone: { last: string; before: string; first: string }[] = [];
    for (const [i, p] of prompts.entries())
      alone.push(
        await pass([p], [want[i]], (l) => ({
          last: bits(l.last(0)),
          before: bits(l.at(0, p.length - 2)),
          first: bits(l.at(0, 0)),
        })),
      );
    const order = [...prompts.keys()].reverse();
    // Interleaved: a row's last, then a position past the wanted ones (computed on demand), then a wanted one.
    const read = await pass(prompts, want, (l) =>
      order.map((i) => ({
        i,
        last: bits(l.last(i)),
        first: bits(l.at(i, 0)),
        before: bits(l.at(i, prompts[i].length - 2)),
      })),
    );
    for (const { i, last, first, before } of read) {
      expect(last, `row ${i}'s last`).toBe(alone[i].last);
      expect(before, `row ${i}'s next to last`).toBe(alone[i].before);
      expect(first, `row ${i}'s first`).toBe(alone[i].first);
    }
    // In order, twice over: a chunk read again is the same.
    const twice = await pass(prompts, want, (l) => [...order, ...order].map((i) => bits(l.last(i))));
    expect(twice).toEqual([...order, ...order].map((i) => alone[i].last));
  });
});
