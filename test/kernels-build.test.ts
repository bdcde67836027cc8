// The committed edge-kernels*.wasm (all four builds) are what kernels/*.c build to: CI (which installs
// clang-16 and lld-16 through .ci/system-packages) rebuilds them and fails on any difference, so the binaries
// cannot drift from their source.
// Elsewhere, without a compiler, the test says why it cannot run; `npm test` and `npm start` need none.
import { execFileSync, spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { KERNELS_BUILDS, kernelsFileName } from '../src/backends/edge-kernels-node.js';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const hasCompiler = spawnSync('sh', ['-c', 'command -v clang-16 && test -x /usr/lib/llvm-16/bin/wasm-ld']).status === 0;
const required = Boolean(process.env.CI);
const reason = 'clang-16 and lld-16 (Debian packages of those names) are not installed';

describe(`the four builds of edge-kernels*.wasm${hasCompiler ? '' : ` (skipped: ${reason})`}`, () => {
  if (!hasCompiler && required)
    it('needs its compiler in CI', () => expect.fail(`${reason}; .ci/system-packages installs them`));
  it.skipIf(!hasCompiler)('are exactly what kernels/build.sh makes of kernels/*.c', () => {
    const dir = mkdtempSync(join(tmpdir(), 'edge-kernels-'));
    try {
      execFileSync('bash', [join(ROOT, 'kernels/build.sh'), dir], { stdio: 'pipe' });
      expect(KERNELS_BUILDS).toHaveLength(4);
      for (const name of KERNELS_BUILDS.map(kernelsFileName)) {
        const built = readFileSync(join(dir, name));
        const committed = readFileSync(join(ROOT, 'src/engine/runners/wasm', name));
        expect(built.equals(committed), `run kernels/build.sh and commit src/engine/runners/wasm/${name}`).toBe(true);
        expect(committed.length, 'the kernels stay small').toBeLessThan(200 * 1024);
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
