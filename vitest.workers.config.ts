import { cloudflareTest } from '@cloudflare/vitest-pool-workers';
import { defineConfig } from 'vitest/config';

export default defineConfig({
  plugins: [
    cloudflareTest({
      wrangler: { configPath: './wrangler.toml' },
      // Webhook retries in milliseconds rather than seconds, so the retry tests run fast.
      // FUZZ_SEED from the environment replays another seed of test/workers/fuzz.test.ts.
      miniflare: {
        bindings: {
          // The suites check exact behaviour on the generated `tiny`; `npm start` serves wordnet-chat.
          MODEL: 'tiny',
          WEBHOOK_RETRY_BASE_MS: '20',
          WEBHOOK_MAX_ATTEMPTS: '4',
          ALLOW_LOOPBACK_CALLBACKS: 'true',
          FUZZ_SEED: process.env.FUZZ_SEED ?? '',
        },
      },
    }),
  ],
  test: {
    name: 'workers',
    include: ['test/workers/**/*.test.ts'],
    globalSetup: ['test/workers/global-setup.ts', 'test/workers/receiver-setup.ts'],
    testTimeout: 120_000,
    hookTimeout: 120_000,
  },
});
