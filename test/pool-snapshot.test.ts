// Engine.poolSnapshot(): the picture of the KV pool the playground draws. Real engine, tiny model: two
// session turns with the same long system prompt must show the second holding the first one's prefix
// blocks (reference count 2), and the counts must add up block by block.
import { describe, expect, it } from 'vitest';
import type { PoolSnapshot } from '../src/engine/kv/pool-snapshot.js';
import { collect, loadEngine } from './helpers/engines.js';

const SYSTEM =
  'You are a terse assistant for the edge-infer playground. Answer in one short sentence, and never repeat the question back.';

function checkCounts(s: PoolSnapshot): void {
  const count = (c: string) => [...s.states].filter((x) => x === c).length;
  expect(s.states.length).toBe(s.total);
  expect(count('u') + count('p')).toBe(s.used);
  expect(count('f')).toBe(s.free);
  expect(count('i')).toBe(s.cachedIdle);
  for (const [id, c] of s.states.split('').entries()) expect(c === 'u' || c === 'p').toBe(s.refs[id] > 0);
}

describe('Engine.poolSnapshot', () => {
  it('shows each session’s block table and the prefix blocks two sessions share', async () => {
    const engine = await loadEngine('cpu', 'tiny', { kvCacheBytes: 256 * 16 * 512 });
    const empty = engine.poolSnapshot();
    checkCounts(empty);
    expect(empty).toMatchObject({ total: 256, used: 0, free: 256, cachedIdle: 0, sequences: [], steps: [] });

    const prompt = (user: string) => ({
      messages: [
        { role: 'system' as const, content: SYSTEM },
        { role: 'user' as const, content: user },
      ],
      max_tokens: 4,
      temperature: 0,
    });
    await collect(engine, prompt('Hello there'), undefined, 'session-a');
    const one = engine.poolSnapshot();
    checkCounts(one);
    const a = one.sequences.find((s) => s.key === 'session-a')!;
    expect(a.state).toBe('kept');
    expect(a.blocks.length).toBe(Math.ceil(a.tokens / one.blockSize));
    expect(a.blocks.every((b) => one.refs[b] === 1)).toBe(true);
    expect(one.steps.length).toBeGreaterThan(0);
    expect(one.steps.every((st) => st.batch >= 1 && st.batch <= one.maxBatchSize)).toBe(true);

    await collect(engine, prompt('What is a block?'), undefined, 'session-b');
    const two = engine.poolSnapshot();
    checkCounts(two);
    const b = two.sequences.find((s) => s.key === 'session-b')!;
    const shared = b.blocks.filter((id) => a.blocks.includes(id));
    expect(shared.length).toBeGreaterThan(0);
    // The shared blocks are the leading (prefix) ones, full and cached, held by both sessions.
    expect(b.blocks.slice(0, shared.length)).toEqual(a.blocks.slice(0, shared.length));
    for (const id of shared) {
      expect(two.refs[id]).toBe(2);
      expect(two.states[id]).toBe('p');
    }

    engine.releaseSession('session-a');
    engine.releaseSession('session-b');
    const after = engine.poolSnapshot();
    checkCounts(after);
    expect(after.used).toBe(0);
    expect(after.cachedIdle).toBeGreaterThan(0);
    expect(after.sequences).toEqual([]);
  });
});
