// The engine sees runners only through runners/ (the contract and the factory): nothing in the engine's own
// modules imports a runner's internals from runners/webgpu/ or runners/wasm/, so a runner can change without
// the engine knowing.
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const ENGINE = fileURLToPath(new URL('../src/engine', import.meta.url));
/** The engine's own folders; the runners' (runners/ and the runners under it) may import each other. */
const ENGINE_FOLDERS = ['sampling', 'kv', 'beam', 'speculative', 'constraints'];

function sources(dir: string, deep: boolean): string[] {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) return deep ? sources(path, true) : [];
    return name.endsWith('.ts') ? [path] : [];
  });
}

describe('the engine', () => {
  it('imports nothing from runners/webgpu/ or runners/wasm/', () => {
    const files = [...sources(ENGINE, false), ...ENGINE_FOLDERS.flatMap((f) => sources(join(ENGINE, f), true))];
    const reaching = files.flatMap((file) =>
      [...readFileSync(file, 'utf8').matchAll(/from '((?:\.\.?\/)+runners\/(?:webgpu|wasm)\/[^']+)'/g)].map(
        (m) => `${relative(ENGINE, file)}: ${m[1]}`,
      ),
    );
    expect(files.length).toBeGreaterThan(30);
    expect(reaching).toEqual([]);
  });
});
