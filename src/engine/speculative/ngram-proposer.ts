/**
 * Prompt lookup (n-gram) proposals: when the context's last n tokens occurred before, propose the tokens
 * that followed their most recent earlier occurrence. Needs no second model; pays off on repetitive text
 * (code edits, quoting, summaries of the prompt). Longer n-grams are tried first: they are better evidence.
 */
export class NgramProposer {
  constructor(
    private readonly maxNgram = 4,
    private readonly minNgram = 1,
  ) {}

  /** Up to `count` tokens to follow `tokens`; [] when no n-gram of the suffix recurs. */
  propose(tokens: readonly number[], count: number): number[] {
    const length = tokens.length;
    for (let n = Math.min(this.maxNgram, length - 1); n >= this.minNgram; n--) {
      // The suffix is tokens[length - n, length); candidates start before it, latest first.
      for (let start = length - n - 1; start >= 0; start--) {
        let match = true;
        for (let i = 0; i < n && match; i++) match = tokens[start + i] === tokens[length - n + i];
        if (match) return tokens.slice(start + n, Math.min(start + n + count, length));
      }
    }
    return [];
  }
}
