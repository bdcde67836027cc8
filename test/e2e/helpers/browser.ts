import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium, type BrowserContext } from 'playwright-core';

/** Debian's chromium, installed by .ci/system-packages: no browser download, ever. */
export const CHROMIUM = '/usr/bin/chromium';

/**
 * Flags for a quiet, offline, throw-away browser: no sandbox (CI runs as root), no GPU, and none of the
 * background traffic (updates, sync, QUIC probes) a fresh profile would otherwise start.
 */
const FLAGS = [
  '--headless',
  '--no-sandbox',
  '--disable-gpu',
  '--disable-quic',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
];

export interface Browser {
  context: BrowserContext;
  close(): Promise<void>;
}

/** Starts chromium with a fresh profile (Playwright passes it as --user-data-dir), removed on close. */
export async function startBrowser(): Promise<Browser> {
  const profile = mkdtempSync(join(tmpdir(), 'edge-infer-chromium-'));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    args: FLAGS,
    viewport: { width: 1360, height: 860 },
  });
  return {
    context,
    close: async () => {
      await context.close();
      rmSync(profile, { recursive: true, force: true });
    },
  };
}
