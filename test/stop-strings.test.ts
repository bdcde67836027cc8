import { describe, expect, it } from 'vitest';
import { InvalidRequestError } from '../src/engine/errors.js';
import { StopStringMatcher, validateStops } from '../src/engine/stop-strings.js';
import { Xoshiro128 } from '../src/engine/sampling/rng.js';

/** Feeds the pieces, then flushes unless stopped; returns every emitted piece and the stop flag. */
function feed(stops: string[], pieces: string[]): { out: string; emitted: string[]; stopped: boolean } {
  const m = new StopStringMatcher(stops);
  const emitted: string[] = [];
  let stopped = false;
  for (const p of pieces) {
    const r = m.push(p);
    emitted.push(r.emit);
    if (r.stopped) {
      stopped = true;
      break;
    }
  }
  if (!stopped) emitted.push(m.flush());
  return { out: emitted.join(''), emitted, stopped };
}

/** What a whole-text search gives: cut before the stop that ends first (the longest, if several). */
function reference(stops: string[], text: string): { out: string; stopped: boolean } {
  for (let end = 1; end <= text.length; end++) {
    const head = text.slice(0, end);
    const hits = stops.filter((s) => head.endsWith(s)).sort((a, b) => b.length - a.length);
    if (hits.length > 0) return { out: text.slice(0, end - hits[0].length), stopped: true };
  }
  return { out: text, stopped: false };
}

describe('StopStringMatcher', () => {
  it('passes text through with no stops', () => {
    expect(feed([], ['a', 'bc', ''])).toMatchObject({ out: 'abc', stopped: false });
  });

  it('catches a stop split over many pieces and never emits any of it', () => {
    const r = feed(['STOP'], ['hello S', 'T', 'O', 'P and more']);
    expect(r).toMatchObject({ out: 'hello ', stopped: true });
    expect(r.emitted).toEqual(['hello ', '', '', '']);
  });

  it('holds back only what could start a stop, and releases it when it cannot', () => {
    const m = new StopStringMatcher(['abc']);
    expect(m.push('xxab')).toEqual({ emit: 'xx', stopped: false });
    expect(m.push('d')).toEqual({ emit: 'abd', stopped: false });
    expect(m.push('a')).toEqual({ emit: '', stopped: false });
    expect(m.flush()).toBe('a');
    expect(m.flush()).toBe('');
  });

  it('handles overlapping prefixes ("ababc" with stop "abc")', () => {
    expect(feed(['abc'], ['ab', 'ab', 'c'])).toMatchObject({ out: 'ab', stopped: true });
    expect(feed(['abc'], ['a', 'b', 'a', 'b', 'c'])).toMatchObject({ out: 'ab', stopped: true });
    expect(feed(['abc'], ['ababc'])).toMatchObject({ out: 'ab', stopped: true });
    expect(feed(['aab'], ['a', 'a', 'a', 'b'])).toMatchObject({ out: 'a', stopped: true });
  });

  it('with several stops, cuts at the first to complete, whatever the chunking', () => {
    for (const pieces of [['bbbaa'], ['b', 'b', 'b', 'a', 'a'], ['bbb', 'aa']]) {
      expect(feed(['bbaa', 'ba'], pieces)).toMatchObject({ out: 'bb', stopped: true });
    }
    expect(feed(['abc', 'bc'], ['xabc'])).toMatchObject({ out: 'x', stopped: true }); // end together: the longer wins
    expect(feed(['abc', 'abcd'], ['abcd'])).toMatchObject({ out: '', stopped: true });
    expect(feed(['world', 'lo w'], ['hel', 'lo world'])).toMatchObject({ out: 'hel', stopped: true });
    expect(feed(['\n\n', 'END'], ['a\n', 'b', 'E', 'ND'])).toMatchObject({ out: 'a\nb', stopped: true });
  });

  it('emits nothing after a stop, and flush gives nothing', () => {
    const m = new StopStringMatcher(['x']);
    expect(m.push('ax b')).toEqual({ emit: 'a', stopped: true });
    expect(m.push('more')).toEqual({ emit: '', stopped: true });
    expect(m.flush()).toBe('');
    expect(m.isStopped).toBe(true);
  });

  it('agrees with a whole-text search for random texts split at random points', () => {
    const rng = new Xoshiro128(99);
    const pick = (s: string) => s[rng.nextUint32() % s.length];
    for (let trial = 0; trial < 400; trial++) {
      const stops = Array.from({ length: 1 + (rng.nextUint32() % 3) }, () =>
        Array.from({ length: 1 + (rng.nextUint32() % 4) }, () => pick('ab')).join(''),
      );
      const text = Array.from({ length: rng.nextUint32() % 16 }, () => pick('abc')).join('');
      const pieces: string[] = [];
      for (let i = 0; i < text.length; ) {
        const len = rng.nextUint32() % 4;
        pieces.push(text.slice(i, i + len));
        i += len;
      }
      const got = feed(stops, pieces);
      const want = reference(stops, text);
      expect({ out: got.out, stopped: got.stopped }, `${JSON.stringify(stops)} ${JSON.stringify(pieces)}`).toEqual(
        want,
      );
    }
  });

  it('refuses empty stop strings', () => {
    expect(() => new StopStringMatcher([''])).toThrow(InvalidRequestError);
  });
});

describe('validateStops', () => {
  it('accepts absent, null, a string, and up to 4 strings', () => {
    expect(validateStops(undefined)).toEqual([]);
    expect(validateStops(null)).toEqual([]);
    expect(validateStops('\n')).toEqual(['\n']);
    expect(validateStops(['a', 'b', 'c', 'd'])).toEqual(['a', 'b', 'c', 'd']);
    expect(validateStops([])).toEqual([]);
  });
  it.each([[''], [['a', 'b', 'c', 'd', 'e']], [['a', '']], [[1]], [['a', null]], [5], [{}]])(
    'refuses %j naming stop',
    (bad) => {
      try {
        validateStops(bad);
        expect.unreachable();
      } catch (e) {
        expect(e).toBeInstanceOf(InvalidRequestError);
        expect((e as InvalidRequestError).param).toBe('stop');
      }
    },
  );
});
