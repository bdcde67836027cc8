// The engine sees runners only through runners/ itself (the contract, the factory, the budget and the plan):
// nothing in the engine's own modules imports a runner's internals from runners/wasm/, runners/ort/,
// runners/webgpu/ or runners/stages/, so a runner can change without the engine knowing. The file-format
// readers (formats/) are the engine's too: the runners read through them, never the other way round.
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { circles, importGraph } from './helpers/import-graph.js';

const ENGINE = fileURLToPath(new URL('../src/engine', import.meta.url));
/** The engine's own folders; the runners (runners/ and each runner's folder under it) may import each other. */
const ENGINE_FOLDERS = ['sampling', 'kv', 'beam', 'speculative', 'constraints', 'model', 'formats'];
/** A runner's own folder under runners/, as an import names it from anywhere in the engine. */
const RUNNER_INTERNALS = /from '((?:\.\.?\/)+runners\/(?:wasm|ort|webgpu|stages)\/[^']+)'/g;
/**
 * The reaches that remain, each for a reason; a new one fails the test. A draft model runs on onnxruntime
 * whatever the target runs on (load-draft builds its OnnxRunner itself, not through loadRunner), and a model
 * split over pipeline stages is handed the links to them (the StageLink type of the stages' protocol).
 */
const ALLOWED = new Set([
  'speculative/load-draft.ts: ../runners/ort/onnx-runner.js',
  'model-load.ts: ./runners/stages/stage-protocol.js',
]);

function sources(dir: string, deep: boolean): string[] {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) return deep ? sources(path, true) : [];
    return name.endsWith('.ts') ? [path] : [];
  });
}

describe('the engine', () => {
  it("imports nothing from a runner's internals (runners/wasm, ort, webgpu, stages)", () => {
    const files = [...sources(ENGINE, false), ...ENGINE_FOLDERS.flatMap((f) => sources(join(ENGINE, f), true))];
    const reaching = files.flatMap((file) =>
      [...readFileSync(file, 'utf8').matchAll(RUNNER_INTERNALS)].map((m) => `${relative(ENGINE, file)}: ${m[1]}`),
    );
    expect(files.length).toBeGreaterThan(30);
    expect(reaching.filter((r) => !ALLOWED.has(r))).toEqual([]);
    // An allowance that no longer matches an import is stale: drop it, so it cannot excuse a later one.
    expect([...ALLOWED].filter((a) => !reaching.includes(a))).toEqual([]);
  });
});

const SRC = fileURLToPath(new URL('../src', import.meta.url));

describe('the import graph of src/', () => {
  const graph = importGraph(SRC);

  it('has no circle (type-only imports count: they tie two modules as much)', () => {
    expect(graph.size).toBeGreaterThan(150);
    expect(circles(graph)).toEqual([]);
  });

  it('the file formats and the model description import nothing from the runners', () => {
    const reaching = [...graph].flatMap(([file, targets]) =>
      /^engine\/(formats|model)\//.test(file)
        ? targets.filter((t) => t.startsWith('engine/runners/')).map((t) => `${file} -> ${t}`)
        : [],
    );
    expect(reaching).toEqual([]);
  });

  it('no import runs back up: tokenizer below engine below objects below worker', () => {
    const up = (from: RegExp, to: RegExp) =>
      [...graph].flatMap(([file, targets]) =>
        from.test(file) ? targets.filter((t) => to.test(t)).map((t) => `${file} -> ${t}`) : [],
      );
    expect(up(/^tokenizer\//, /^engine\//)).toEqual([]);
    expect(up(/^engine\//, /^(worker|objects)\/|^env\.ts$/)).toEqual([]);
    // The objects are below the worker that routes to them; env.ts and the sources below both.
    expect(up(/^objects\//, /^worker\//)).toEqual([]);
    expect(up(/^(env\.ts|sources\/|backends\/)/, /^(worker|objects)\//)).toEqual([]);
  });
});
