// The edge section's service side from two checkouts at once: this one's `wrangler dev` and another's (a previous
// commit's worktree, its node_modules linked to this one's and the generated models copied), both with edge.ts's
// settings, timed in turns (both batch-1 streams back to back, then both sides' streams; the order alternating by
// round) and compared round by round: a kernel change as it reaches users. This host moves between two speeds; a
// pair's two figures are taken seconds apart, so their ratio mostly sees one of them.
//   batch 1:  one stream of `long` tokens;  streams: `streams` streams of `short` tokens (`--streams 0`: none)
//
//   git worktree add /tmp/before REV && ln -s "$PWD/node_modules" /tmp/before/node_modules && cp -r models /tmp/before/
//   tsx scripts/bench/edge-ab.ts --before /tmp/before [--rounds 7] [--streams 16]
import { join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import type { startDevServer, DevServer } from '../lib/dev-server.js';
import { answerHelp } from '../lib/help.js';
import { loadModelMeta } from '../../src/engine/model/model-files.js';
import { directorySource } from '../../src/sources/directory-source.js';
import { TextTokenizer } from '../../src/tokenizer/tokenizer.js';
import { startEdgeServer } from './edge.js';
import { promptIds } from './engine-runs.js';
import { ensureBenchModels, modelDir } from './models.js';
import { clients, inTurn, streamOnce } from './service.js';
import { ratioByRun, Samples, sampled } from './stats.js';

answerHelp(
  'Usage: tsx scripts/bench/edge-ab.ts --before DIR [--rounds 7] [--streams 16] [--long 256] [--short 64]\n' +
    "  DIR: another checkout (a git worktree of an earlier commit, with this one's node_modules linked and models/\n" +
    '  copied): its wrangler dev and this one run side by side, batch 1 and streams timed in turns.',
);
const { values } = parseArgs({
  options: {
    before: { type: 'string' },
    rounds: { type: 'string', default: '7' },
    streams: { type: 'string', default: '16' },
    long: { type: 'string', default: '256' },
    short: { type: 'string', default: '64' },
  },
});
if (!values.before) throw new Error('--before DIR: the other checkout (see the header of this file)');
const rounds = Number(values.rounds);
const streams = Number(values.streams);
const [long, short] = [Number(values.long), Number(values.short)];

ensureBenchModels([{ model: 'bench-135m', dtype: 'q4' }]);
const beforeDir = resolve(values.before);
const startBefore = (
  (await import(join(beforeDir, 'scripts/lib/dev-server.ts'))) as { startDevServer: typeof startDevServer }
).startDevServer;
const after = await startEdgeServer();
// A server left running would take the other core from every later measurement on this 2-core host.
let before: DevServer;
try {
  before = await startEdgeServer(startBefore);
} catch (err) {
  await after.stop();
  throw err;
}
const servers = { after, before };
// The ids edge.ts's prompts draw from (Engine.samplableVocab): bench-135m's tokenizer is far smaller than its
// 49,152-row embedding.
const meta = await loadModelMeta(directorySource(modelDir('bench-135m')));
const vocab = Math.min(
  meta.config.vocabSize,
  TextTokenizer.fromJson(meta.tokenizerJson, meta.tokenizerConfig).vocabSize,
);
const samples = new Samples();
try {
  for (let round = -1; round < rounds; round++) {
    const seed = 700 + round;
    const sides = round % 2 ? (['before', 'after'] as const) : (['after', 'before'] as const);
    // The two batch-1 streams back to back, then the two sides' streams: each pair seconds apart.
    const one = await inTurn(sides, (side) =>
      clients(1, () => streamOnce(servers[side].url, promptIds(32, seed, 0, vocab), long)),
    );
    const many =
      streams > 0
        ? await inTurn(sides, (side) =>
            clients(streams, (i) => streamOnce(servers[side].url, promptIds(32, seed, i, vocab), short)),
          )
        : undefined;
    if (round < 0) continue;
    for (const side of sides) {
      samples.add(`${side}:1`, one[side].tokPerS);
      if (many) samples.add(`${side}:n`, many[side].tokPerS);
    }
    const last = (k: string) => samples.get(k).at(-1)?.toFixed(1) ?? '-';
    console.error(
      `round ${round + 1}/${rounds}: batch 1 ${last('after:1')} (before ${last('before:1')}) tok/s; ` +
        `${streams} streams ${last('after:n')} (before ${last('before:n')})`,
    );
  }
  const show = (k: string, label: string) => {
    const ratio = ratioByRun(samples.get(`after:${k}`), samples.get(`before:${k}`));
    const [a, b] = [sampled(samples.get(`after:${k}`)), sampled(samples.get(`before:${k}`))];
    console.log(
      `${label}: ${a.median.toFixed(1)} tok/s against ${b.median.toFixed(1)}: ${ratio.median.toFixed(2)}x ` +
        `(rounds ${ratio.runs.map((r) => r.toFixed(2)).join(' ')})`,
    );
  };
  show('1', 'batch 1');
  if (streams > 0) show('n', `${streams} streams`);
} finally {
  await Promise.all([servers.after.stop(), servers.before.stop()]);
}
