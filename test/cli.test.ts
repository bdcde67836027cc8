// The CLI as a user runs it: a real child process, its stdout parsed.
import { spawnSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { loadReference } from './reference/load-reference.js';
import { modelDir } from './helpers/engines.js';

function generate(...args: string[]): { status: number | null; stdout: string; stderr: string } {
  const result = spawnSync('npx', ['tsx', 'scripts/generate.ts', '--model', modelDir('tiny'), ...args], {
    encoding: 'utf8',
    timeout: 60_000,
  });
  return { status: result.status, stdout: result.stdout, stderr: result.stderr };
}

describe('npm run generate', () => {
  it('--json with temperature 0 gives the reference greedy tokens, on both backends', async () => {
    const ref = await loadReference(modelDir('tiny'));
    for (const backend of ['cpu', 'wasm']) {
      const { status, stdout } = generate(
        '--prompt',
        'Hello',
        '--max-tokens',
        '32',
        '--temperature',
        '0',
        '--json',
        '--backend',
        backend,
      );
      expect(status).toBe(0);
      const out = JSON.parse(stdout);
      const expected = ref.greedy(out.prompt_ids, 32);
      const eos = expected.findIndex((t) => t === 0 || t === 2);
      expect(out.token_ids).toEqual(eos >= 0 ? expected.slice(0, eos + 1) : expected);
      expect(out).toMatchObject({ finish_reason: eos >= 0 ? 'stop' : 'length' });
      expect(typeof out.text).toBe('string');
      expect(out.ttft_ms).toBeGreaterThan(0);
      expect(out.decode_tokens_per_s).toBeGreaterThan(0);
    }
  });

  it('streams plain text and takes chat messages from a file', () => {
    const file = join(tmpdir(), `messages-${process.pid}.json`);
    writeFileSync(file, JSON.stringify([{ role: 'user', content: 'Hi there' }]));
    const { status, stdout, stderr } = generate('--messages', file, '--max-tokens', '8', '--seed', '3');
    expect(status).toBe(0);
    expect(stdout.length).toBeGreaterThan(0);
    expect(stderr).toMatch(/completion \d+ tokens, ttft [\d.]+ ms/);
  });

  it('refuses a bad parameter with status 2, naming it', () => {
    const { status, stderr } = generate('--prompt', 'Hello', '--top-p', '1.5');
    expect(status).toBe(2);
    expect(stderr).toMatch(/top_p/);
  });

  it('--speculative ngram|draft gives the same greedy tokens and reports the proposals', () => {
    const base = [
      '--prompt',
      'the cat sat on the mat, the cat sat on the mat, the cat',
      '--max-tokens',
      '24',
      '--temperature',
      '0',
      '--json',
    ];
    const plain = JSON.parse(generate(...base).stdout);
    const lookup = generate(...base, '--speculative', 'ngram', '--num-speculative-tokens', '3');
    expect(lookup.status, lookup.stderr).toBe(0);
    const drafted = generate(...base, '--speculative', 'draft', '--draft-model', modelDir('tiny-draft'));
    expect(drafted.status, drafted.stderr).toBe(0);
    for (const out of [JSON.parse(lookup.stdout), JSON.parse(drafted.stdout)]) {
      expect(out.token_ids).toEqual(plain.token_ids);
      expect(out.speculation.proposedTokens).toBeGreaterThan(0);
    }
    const noDraft = generate(...base, '--speculative', 'draft');
    expect(noDraft.status).toBe(2);
    expect(noDraft.stderr).toMatch(/speculative\.method/);
  });

  it('--beam-width prints the --n best beams, best first, with their scores', () => {
    const { status, stdout, stderr } = generate(
      '--prompt',
      'Hello',
      '--max-tokens',
      '6',
      '--beam-width',
      '4',
      '--n',
      '3',
      '--json',
    );
    expect(status, stderr).toBe(0);
    const beams = stdout
      .trim()
      .split('\n')
      .map((line) => JSON.parse(line));
    expect(beams).toHaveLength(3);
    for (const b of beams) expect(b.token_ids.length).toBeGreaterThan(0);
    expect(beams[0].beam_score).toBeGreaterThanOrEqual(beams[1].beam_score);
    expect(beams[1].beam_score).toBeGreaterThanOrEqual(beams[2].beam_score);
  });
});
