// Limits one key cannot use against another: MAX_QUEUE shared fairly between keys and counted in
// sequences, and JSON nesting refused before anything recursive reads it.
import { describe, expect, it } from 'vitest';
import { admitToQueue, queueRefusal } from '../src/objects/tenancy/queue-share.js';
import { checkJsonDepth, JsonDepthError, MAX_JSON_DEPTH, readJsonText } from '../src/json-limits.js';

const queue = (entries: [string, number][], maxQueue = 64) => ({ waiting: new Map(entries), maxQueue });

describe('the queue is shared fairly, in sequences', () => {
  it('one key alone may fill it; an empty queue takes any request', () => {
    expect(admitToQueue(queue([]), 'bob', 64).ok).toBe(true);
    expect(admitToQueue(queue([]), 'bob', 200).ok).toBe(true);
    expect(admitToQueue(queue([['bob', 48]]), 'bob', 16).ok).toBe(true);
    expect(admitToQueue(queue([['bob', 48]]), 'bob', 17)).toMatchObject({ ok: false, code: 'overloaded' });
  });

  it("another key gets its share even when the first filled the queue (bob's 3 × 64 prompts)", () => {
    const full = queue([['bob', 64]]);
    expect(admitToQueue(full, 'alice', 1).ok).toBe(true);
    expect(admitToQueue(full, 'alice', 32).ok).toBe(true);
    expect(admitToQueue(full, 'alice', 33).ok).toBe(false);
    // bob, past his share while alice waits, is refused however small his request.
    expect(
      admitToQueue(
        queue([
          ['bob', 40],
          ['alice', 1],
        ]),
        'bob',
        1,
      ),
    ).toMatchObject({
      ok: false,
      code: 'queue_share_exceeded',
      share: 32,
    });
  });

  it("a request larger than the key's share is refused while another waits, and its 429 says the request is the excess", () => {
    const waiting = new Map([['bob', 1]]);
    const refusal = queueRefusal({ waitingByGroup: () => waiting }, 64, 'alice', 64);
    expect(refusal).toMatchObject({ status: 429, code: 'queue_share_exceeded', rateLimit: { retryAfterMs: 1000 } });
    expect(refusal?.message).toBe(
      "this request's 64 sequences would give this key 64 waiting on this shard (0 already), past its fair share of the queue (32 of MAX_QUEUE 64) while other keys wait; retry shortly",
    );
    expect(queueRefusal({ waitingByGroup: () => waiting }, 64, 'alice', 32)).toBeUndefined();
  });

  it('shares shrink as keys join: 64 over 4 keys is 16 each, over 3 is 21', () => {
    const q = queue([
      ['a', 10],
      ['b', 10],
      ['c', 10],
    ]);
    expect(admitToQueue(q, 'd', 16).ok).toBe(true);
    expect(admitToQueue(q, 'd', 17).ok).toBe(false);
    // a, one of three waiting keys: a share of 21, 10 of it used.
    expect(admitToQueue(q, 'a', 11).ok).toBe(true);
    expect(admitToQueue(q, 'a', 12).ok).toBe(false);
  });
});

describe('JSON nesting depth', () => {
  it(`takes ${MAX_JSON_DEPTH} levels and refuses ${MAX_JSON_DEPTH + 1}, ignoring brackets inside strings`, () => {
    const nest = (n: number) => `${'['.repeat(n)}${']'.repeat(n)}`;
    expect(() => checkJsonDepth(nest(MAX_JSON_DEPTH))).not.toThrow();
    expect(() => checkJsonDepth(nest(MAX_JSON_DEPTH + 1))).toThrow(JsonDepthError);
    expect(readJsonText(JSON.stringify({ s: '[[[[{{{{\\"'.repeat(100) }), 2)).toEqual({
      s: '[[[[{{{{\\"'.repeat(100),
    });
  });

  it('refuses 100,000 levels in linear time, without a stack overflow', () => {
    const deep = `{"tools":${'['.repeat(100_000)}${']'.repeat(100_000)}}`;
    const started = performance.now();
    expect(() => readJsonText(deep)).toThrow(JsonDepthError);
    expect(performance.now() - started).toBeLessThan(1000);
  });
});
