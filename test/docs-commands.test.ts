// The commands the docs show are commands that exist (issue 47, finding 5): every `npm run <script>` in README.md
// and docs/ names a script of package.json, `npm start -- --model <name>` is the --var it stands for, README is the
// front page it aims to be (at most 12 KB, serve and test its first two commands), and its --port example is not a
// port the tour uses for something else. README's tour itself runs against wrangler dev (test/e2e/readme-tour.test.ts).
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { expect, it } from 'vitest';
import { modelFlag, startArgs } from '../scripts/start-args.js';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const readme = readFileSync(join(ROOT, 'README.md'), 'utf8');
const pages = [
  ['README.md', readme],
  ...readdirSync(join(ROOT, 'docs'))
    .filter((f) => f.endsWith('.md'))
    .map((f) => [`docs/${f}`, readFileSync(join(ROOT, 'docs', f), 'utf8')]),
];
const scripts = Object.keys(
  (JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { scripts: Record<string, string> }).scripts,
);

it('every `npm run <script>` the docs show is a script of package.json', () => {
  const unknown: string[] = [];
  for (const [page, text] of pages)
    for (const [, name] of text.matchAll(/npm run ([a-z][\w:-]*)/g))
      if (!scripts.includes(name)) unknown.push(`${page}: npm run ${name}`);
  expect(unknown).toEqual([]);
});

it('npm start -- --model <name> is --var MODEL:<name>, which wrangler takes', () => {
  expect(modelFlag(['--model', 'qwen2.5-0.5b', '--port', '8788'])).toEqual([
    '--var',
    'MODEL:qwen2.5-0.5b',
    '--port',
    '8788',
  ]);
  expect(modelFlag(['--model=tiny'])).toEqual(['--var', 'MODEL:tiny']);
  expect(startArgs({}, modelFlag(['--model', 'tiny']))).toContain('MODEL:tiny');
  expect(startArgs({}, modelFlag(['--model', 'tiny']))).not.toContain('--model');
});

it('README is at most 12 KB, and its first two commands are serve and test', () => {
  expect(Buffer.byteLength(readme)).toBeLessThanOrEqual(12 * 1024);
  const first = /```sh\n([\s\S]*?)\n```/.exec(readme)![1].split('\n');
  expect(first[0]).toMatch(/^npm ci && npm start +# serves the API/);
  expect(first[1]).toMatch(/^npm ci && npm test +# runs every test/);
});

it("README's --port example is not a port its tour uses for something else", () => {
  const port = /npm start -- --port (\d+)/.exec(readme)![1];
  expect(readme).not.toContain(`127.0.0.1:${port}/`);
});
