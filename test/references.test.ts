// Every file a comment or a doc cites exists: paths (`src/engine/kv/block-pool.ts`) where they are written out,
// and bare file names (`quant.h`, `generation-run.ts`) somewhere in the tree. A reference that points nowhere
// sends the next reader looking for what was renamed or never written.
import { readdirSync, readFileSync, statSync, existsSync } from 'node:fs';
import { basename, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const SKIP = new Set([
  'node_modules',
  '.git',
  'models',
  '.wrangler',
  '.bench',
  'dist',
  '.scratch',
  'artifacts',
  'vendor',
]);

function walk(dir: string, out: string[] = []): string[] {
  for (const name of readdirSync(dir)) {
    if (SKIP.has(name)) continue;
    const path = join(dir, name);
    if (statSync(path).isDirectory()) walk(path, out);
    else out.push(path);
  }
  return out;
}

const files = walk(ROOT);
const names = new Set(files.map((f) => basename(f)));
/** What a reference may name: our sources, docs, kernels, shaders, scripts. */
const CITED = /(?<![\w/.@-])((?:[\w-]+\/)*[\w.-]+\.(?:ts|md|c|h|wgsl|sh))(?![\w/-])/g;
/**
 * Names that are not files of ours: other projects' (llama2.c is a project), system headers, patterns, and the
 * reports the GPU kit writes on the GPU machine (gpu.md, summary.md).
 */
const FOREIGN =
  /^(llama2\.c|run\.c|quants\.c|ggml-quants\.c|ggml\.h|ggml-common\.h|gguf\.h|wasm_simd128\.h|stdio\.h|xoshiro128starstar\.c|sse\.ts|hono-base\.ts|index\.d\.ts|gpu\.md|summary\.md|\.test\.ts|.*\*.*)$/;

function citations(text: string, comments: boolean): string[] {
  // In code, only what comments say (a string may name a file that is made at run time).
  const parts = comments ? [...text.matchAll(/\/\/.*$|\/\*[\s\S]*?\*\/|^\s*#.*$/gm)].map((m) => m[0]) : [text];
  return parts.flatMap((part) => [...part.matchAll(CITED)].map((m) => m[1]));
}

describe('references', () => {
  it('name files that exist', () => {
    const broken: string[] = [];
    for (const file of files) {
      const ext = file.split('.').pop();
      const isDoc = ext === 'md';
      if (!isDoc && !['ts', 'c', 'h', 'wgsl', 'sh'].includes(ext!)) continue;
      const text = readFileSync(file, 'utf8');
      for (const ref of citations(text, !isDoc)) {
        if (FOREIGN.test(basename(ref)) || ref.includes('node_modules')) continue;
        const found = ref.includes('/')
          ? existsSync(join(ROOT, ref)) || files.some((f) => f.endsWith(`/${ref}`))
          : names.has(ref);
        if (!found) broken.push(`${relative(ROOT, file)}: ${ref}`);
      }
    }
    expect(broken).toEqual([]);
  });
});
