import { cloudflareTest } from '@cloudflare/vitest-pool-workers';
import { defineConfig } from 'vitest/config';

export default defineConfig({
  plugins: [cloudflareTest({ wrangler: { configPath: './wrangler.toml' } })],
  test: {
    name: 'workers',
    include: ['test/workers/**/*.test.ts'],
    globalSetup: ['test/workers/global-setup.ts'],
    testTimeout: 120_000,
    hookTimeout: 120_000,
  },
});
