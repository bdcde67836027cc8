import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    projects: [
      {
        // Node: engine on onnxruntime-node and onnxruntime-web, reference parity, unit tests.
        test: {
          name: 'node',
          include: ['test/**/*.test.ts'],
          exclude: ['test/workers/**', 'node_modules/**'],
          testTimeout: 60_000,
          hookTimeout: 120_000,
          pool: 'forks',
          globalSetup: ['test/global-setup.ts'],
        },
      },
      // Inside workerd, through @cloudflare/vitest-pool-workers.
      './vitest.workers.config.ts',
    ],
  },
});
