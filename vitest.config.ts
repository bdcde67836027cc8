import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    projects: [
      {
        // Node: engine on onnxruntime-node and onnxruntime-web, reference parity, unit tests.
        test: {
          name: 'node',
          include: ['test/**/*.test.ts'],
          exclude: ['test/workers/**', 'test/e2e/**', 'test/webgpu/**', 'node_modules/**'],
          testTimeout: 60_000,
          hookTimeout: 120_000,
          pool: 'forks',
          globalSetup: ['test/global-setup.ts'],
        },
      },
      {
        // The engine suites again, on our WebAssembly kernels instead of onnxruntime-node (SUITE_BACKEND).
        test: {
          name: 'kernels',
          include: [
            'test/batching.test.ts',
            'test/beam-search.test.ts',
            'test/engine-requests.test.ts',
            'test/prompt-logprobs.test.ts',
            'test/wordnet-chat.test.ts',
            'test/speculative.test.ts',
            'test/structured-outputs.test.ts',
            'test/structured-composition.test.ts',
            'test/request-faults.test.ts',
          ],
          env: { EDGE_INFER_SUITE_BACKEND: 'kernels' },
          testTimeout: 60_000,
          hookTimeout: 120_000,
          pool: 'forks',
          globalSetup: ['test/global-setup.ts'],
        },
      },
      {
        // WebGPU (Dawn from the `webgpu` package; lavapipe on machines without a GPU): the webgpu backend
        // and our WGSL kernels. --liftoff-only: otherwise V8 spends ~30 s optimising ORT's WebGPU wasm.
        test: {
          name: 'webgpu',
          include: ['test/webgpu/**/*.test.ts'],
          testTimeout: 120_000,
          hookTimeout: 120_000,
          pool: 'forks',
          execArgv: ['--liftoff-only'],
          fileParallelism: false,
          // After the CPU-bound projects: lavapipe is slow enough without them beside it.
          sequence: { groupOrder: 1 },
          globalSetup: ['test/global-setup.ts'],
        },
      },
      // Inside workerd, through @cloudflare/vitest-pool-workers.
      './vitest.workers.config.ts',
      {
        // End to end: `wrangler dev` (real workerd) over real HTTP, one server per file, one file at a time.
        test: {
          name: 'e2e',
          include: ['test/e2e/**/*.test.ts'],
          testTimeout: 120_000,
          hookTimeout: 120_000,
          pool: 'forks',
          fileParallelism: false,
          // Last and alone: started beside the other projects on a 2-core machine, `wrangler dev` took past the
          // hook's 120 s to come up (twice, the first e2e file of a full run).
          sequence: { groupOrder: 2 },
          globalSetup: ['test/global-setup.ts'],
        },
      },
    ],
  },
});
