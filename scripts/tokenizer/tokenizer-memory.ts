// What a loaded TextTokenizer costs in memory, for the real Qwen3 and Gemma 3 vocabularies:
//   node --expose-gc --import tsx scripts/tokenizer/tokenizer-memory.ts [qwen3|gemma3 ...]
// Each measurement runs in a fresh process (three per tokenizer, the median reported): the files are read
// and parsed first, then heapUsed and arrayBuffers are taken after a full GC around each step, with the
// parsed JSON dropped before the tokenizer's own cost is read (the engine drops it too):
//   load     TextTokenizer.fromJson (what @huggingface/tokenizers builds, and our bookkeeping)
//   bytes    every token's bytes packed (the first tokenBytes / grammar vocabulary / longestTokenBytes)
//   encode   after encoding a 28 KB text once (BPE caches)
import { execFileSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { readCorpus } from './build-tokenizer.js';
import { REAL_TOKENIZERS, readRealTokenizer, type RealTokenizerName } from './real-tokenizers.js';

const MiB = 1024 * 1024;

interface Sample {
  /** heapUsed with the tokenizer loaded (the parsed files dropped) less the baseline without it. */
  load: number;
  /** arrayBuffers likewise: the typed arrays a tokenizer holds (merge ranks, token index). */
  loadBuffers: number;
  bytes: number;
  encode: number;
  /** The packed bytes' ArrayBuffer memory (outside the JS heap). */
  bytesBuffers: number;
}

function gcNow(): NodeJS.MemoryUsage {
  const gc = (globalThis as { gc?: () => void }).gc;
  if (!gc) throw new Error('run with node --expose-gc');
  for (let i = 0; i < 3; i++) gc();
  return process.memoryUsage();
}

async function measureOnce(name: RealTokenizerName): Promise<Sample> {
  const { TextTokenizer } = await import('../../src/tokenizer/tokenizer.js');
  const text = readCorpus();
  // Built in a function of its own, so no stale register of this frame keeps the parsed JSON alive.
  const build = () => {
    const files = readRealTokenizer(name);
    return TextTokenizer.fromJson(files.tokenizerJson, files.tokenizerConfig);
  };
  const tok = build();
  const loaded = gcNow();
  tok.tokenBytes(0, { addedTokens: 'text' });
  void tok.longestTokenBytes;
  const packed = gcNow();
  tok.encode(text);
  const encoded = gcNow();
  return {
    load: loaded.heapUsed,
    loadBuffers: loaded.arrayBuffers,
    bytes: packed.heapUsed - loaded.heapUsed,
    encode: encoded.heapUsed - packed.heapUsed,
    bytesBuffers: packed.arrayBuffers - loaded.arrayBuffers,
  };
}

/** heapUsed of the same process state without any tokenizer: modules loaded, the corpus read. */
async function baseline(): Promise<NodeJS.MemoryUsage> {
  await import('../../src/tokenizer/tokenizer.js');
  readCorpus();
  return gcNow();
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const mib = (n: number) => `${(n / MiB).toFixed(1)} MiB`;

async function main(): Promise<void> {
  const [mode, arg] = process.argv.slice(2);
  if (mode === '--once') {
    const base = await baseline();
    const s = await measureOnce(arg as RealTokenizerName);
    process.stdout.write(
      JSON.stringify({ ...s, load: s.load - base.heapUsed, loadBuffers: s.loadBuffers - base.arrayBuffers }),
    );
    return;
  }
  const names = (process.argv.slice(2).length ? process.argv.slice(2) : REAL_TOKENIZERS) as RealTokenizerName[];
  const self = fileURLToPath(import.meta.url);
  for (const name of names) {
    const runs: Sample[] = [];
    for (let i = 0; i < 3; i++) {
      const out = execFileSync(process.execPath, ['--expose-gc', '--import', 'tsx', self, '--once', name], {
        encoding: 'utf8',
        maxBuffer: 1 << 20,
      });
      runs.push(JSON.parse(out) as Sample);
    }
    const m = (k: keyof Sample) => mib(median(runs.map((r) => r[k])));
    console.log(
      `${name}: load ${m('load')} heap + ${m('loadBuffers')} buffers; packed bytes +${m('bytes')} heap +${m('bytesBuffers')} buffers; ` +
        `after a 28 KB encode +${m('encode')} heap (median of 3)`,
    );
  }
}

await main();
