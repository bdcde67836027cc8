// The committed edge-kernels.wasm is what kernels/*.c build to: CI (which installs clang and lld through
// .ci/system-packages) rebuilds it and fails on any difference, so the binary cannot drift from its source.
// Elsewhere, without a compiler, the test says why it cannot run; `npm test` and `npm start` need none.
import { execFileSync, spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const hasCompiler = ['clang', 'wasm-ld'].every((tool) => spawnSync('sh', ['-c', `command -v ${tool}`]).status === 0);
const required = Boolean(process.env.CI);
const reason = 'clang and wasm-ld (Debian: clang, lld) are not installed';

describe(`edge-kernels.wasm${hasCompiler ? '' : ` (skipped: ${reason})`}`, () => {
  if (!hasCompiler && required)
    it('needs its compiler in CI', () => expect.fail(`${reason}; .ci/system-packages installs them`));
  it.skipIf(!hasCompiler)('is exactly what kernels/build.sh makes of kernels/*.c', () => {
    const dir = mkdtempSync(join(tmpdir(), 'edge-kernels-'));
    try {
      execFileSync('bash', [join(ROOT, 'kernels/build.sh'), join(dir, 'out.wasm')], { stdio: 'pipe' });
      const built = readFileSync(join(dir, 'out.wasm'));
      const committed = readFileSync(join(ROOT, 'src/engine/kernels/edge-kernels.wasm'));
      expect(built.equals(committed), 'run kernels/build.sh and commit src/engine/kernels/edge-kernels.wasm').toBe(
        true,
      );
      expect(committed.length, 'the kernels stay small').toBeLessThan(200 * 1024);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
