// The playground page in a real browser (Debian's chromium through playwright-core) against `wrangler dev`
// with API_KEYS set: it loads without console errors, asks for the key and sends it only as a header,
// streams a reply token by token with probabilities, shows the name of the key its sessions belong to
// (never the key), and its picture of the KV pool shows the blocks a
// second session shares with the first when both have the same system prompt. Leaves a screenshot in
// artifacts/playground.png (docs/playground.png is a copy of one).
import { mkdirSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import type { Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startBrowser, type Browser } from './helpers/browser.js';
import { startConfiguredServer, type DevServer } from './helpers/wrangler.js';

const KEY = 'playground-test-key';
const KEY_NAME = 'playground';
const ARTIFACTS = fileURLToPath(new URL('../../artifacts/', import.meta.url));

let server: DevServer;
let browser: Browser;
let page: Page;
const consoleErrors: string[] = [];
const requests: { url: string; authorization?: string }[] = [];

beforeAll(async () => {
  [server, browser] = await Promise.all([startConfiguredServer({ API_KEYS: `${KEY_NAME}:${KEY}` }), startBrowser()]);
  page = await browser.context.newPage();
  page.on('console', (msg) => {
    if (msg.type() === 'error') consoleErrors.push(msg.text());
  });
  page.on('pageerror', (err) => consoleErrors.push(String(err)));
  page.on('request', (req) => requests.push({ url: req.url(), authorization: req.headers().authorization }));
});
afterAll(async () => {
  await browser?.close();
  await server?.stop();
});

const text = (selector: string) => page.locator(selector).textContent();

/** Sends a message from the page and waits until its reply has finished streaming. */
async function sendAndWait(message: string): Promise<void> {
  const replies = await page.locator('.msg.assistant').count();
  await page.fill('#input', message);
  await page.click('#send');
  await page.locator('.msg.assistant').nth(replies).waitFor();
  await page.waitForFunction(() => !(document.getElementById('send') as HTMLButtonElement).disabled, undefined, {
    timeout: 60_000,
  });
}

describe('playground', () => {
  it('loads with no console errors and asks for the key', async () => {
    const res = await page.goto(`${server.url}/`);
    expect(res?.status()).toBe(200);
    expect(await page.title()).toBe('edge-infer playground');
    await page.waitForLoadState('networkidle');
    expect(await text('#model')).toBe('model: enter an API key');
    expect(consoleErrors).toEqual([]);
  });

  it('with the key: streams a reply, each token tinted by its probability, and reports TTFT and tokens/s', async () => {
    await page.fill('#key', KEY);
    await page.press('#key', 'Tab'); // `change`
    await expect.poll(() => text('#model')).toBe('model: wordnet-chat');
    // Defaults that fit the model (issue 47): a system prompt of its corpus, and the question it was trained on.
    expect(await page.inputValue('#system')).toBe('You explain English words.');
    expect(await page.getAttribute('#input', 'placeholder')).toContain('What does dog mean?');
    // A system prompt of more than one KV block (16 tokens), so that the two sessions below share a block of it.
    await page.fill(
      '#system',
      'You explain English words. Answer in dictionary form: the word, its part of speech, its sense.',
    );
    await page.fill('#temperature', '0');
    await page.fill('#max_tokens', '64');

    // Count the tokens as they arrive, inside the page (a poll from here can miss a fast stream): a streamed
    // reply grows while the request is still open.
    await page.evaluate(() => {
      const counts: number[] = [];
      (window as unknown as { tokenCounts: number[] }).tokenCounts = counts;
      new MutationObserver(() => counts.push(document.querySelectorAll('.msg.assistant .tok').length)).observe(
        document.body,
        { childList: true, subtree: true },
      );
    });
    await sendAndWait('Hello! What can you do?');
    const seen = await page.evaluate(() => (window as unknown as { tokenCounts: number[] }).tokenCounts);

    expect(await text('#status')).toBe('');
    const tokens = page.locator('.msg.assistant .tok');
    const count = await tokens.count();
    expect(count).toBeGreaterThan(8);
    expect(count).toBeLessThanOrEqual(64);
    // Seen part-way: the reply grew on the page while it was being generated.
    expect(seen.some((n) => n > 0 && n < count)).toBe(true);
    const p = Number(await tokens.first().getAttribute('data-p'));
    expect(p).toBeGreaterThan(0);
    expect(p).toBeLessThanOrEqual(1);
    expect(await tokens.first().getAttribute('data-tip')).toMatch(/%/);
    expect(await text('#ttft')).toMatch(/^\d+ ms$/);
    expect(await text('#tps')).toMatch(/^\d+$/);
    expect(await text('#ntok')).toBe(String(count));
    // Whose session it is: the key's name, never the key.
    expect(await text('#whoami')).toBe(`key: ${KEY_NAME}`);
    expect(await text('#tabs .tab')).toContain(KEY_NAME);
    expect(await page.locator('body').textContent()).not.toContain(KEY);
  });

  it('the key travels only as an Authorization header, never in a URL', async () => {
    const api = requests.filter((r) => new URL(r.url).pathname.startsWith('/v1/'));
    expect(api.length).toBeGreaterThan(2);
    for (const r of api) {
      expect(r.url).not.toContain(KEY);
      expect(r.authorization).toBe(`Bearer ${KEY}`);
    }
  });

  it('the pool picture shows the blocks a second session shares with the first (same system prompt)', async () => {
    // One session: its blocks are its own.
    await expect.poll(async () => Number(await text('#pool-used')), { timeout: 10_000 }).toBeGreaterThan(0);
    expect(await page.locator('#pool').getAttribute('data-shared')).toBe('0');
    expect(await page.locator('#seqs li.mine').count()).toBe(1);

    await page.click('#new-session');
    await expect.poll(() => page.locator('#tabs .tab').count()).toBe(2);
    await sendAndWait('Tell me about paged KV caches.');

    // The second session's prompt starts with the same system message: its leading blocks are the first's.
    await expect
      .poll(async () => Number(await page.locator('#pool').getAttribute('data-shared')), { timeout: 10_000 })
      .toBeGreaterThan(0);
    expect(Number(await text('#pool-shared'))).toBeGreaterThan(0);
    expect(await page.locator('#seqs li.mine').count()).toBe(2);
    expect(await text('#seqs')).toMatch(/\d+ shared/);
    expect(await text('#cached')).toMatch(/^[1-9]\d* \/ \d+$/);

    // For people to look at: hover a token so its alternatives show.
    await page.locator('.msg.assistant .tok').nth(3).hover();
    mkdirSync(ARTIFACTS, { recursive: true });
    await page.screenshot({ path: `${ARTIFACTS}playground.png` });
    expect(consoleErrors).toEqual([]);
  });
});
