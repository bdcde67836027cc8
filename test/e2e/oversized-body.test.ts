// Oversized request bodies against real `wrangler dev`: a 413 in OpenAI's schema, promptly, and the next
// request from anyone still works (wrangler's proxy reuses connections: docs/platform.md, body-discard.ts).
import { connect } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startDevServer, type DevServer } from './helpers/wrangler.js';

let server: DevServer;
beforeAll(async () => {
  server = await startDevServer({ BODY_READ_TIMEOUT_MS: '2000' });
});
afterAll(() => server?.stop());

const chat = { messages: [{ role: 'user', content: 'hi' }], max_tokens: 4 };

async function plainChat(): Promise<number> {
  const res = await fetch(`${server.url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(chat),
  });
  await res.arrayBuffer();
  return res.status;
}

async function expect413(res: Response): Promise<void> {
  const text = await res.text();
  expect(res.status, text).toBe(413);
  expect(JSON.parse(text).error.code).toBe('request_too_large');
}

/** Sends raw HTTP and resolves with the status line and the ms it took, leaving the socket open meanwhile. */
function rawStatus(head: string, body: string, waitMs: number): Promise<{ status: string; ms: number }> {
  return new Promise((resolve, reject) => {
    const { port } = new URL(server.url);
    const started = Date.now();
    const socket = connect(Number(port), '127.0.0.1', () => socket.write(head + body));
    let data = '';
    const timer = setTimeout(() => {
      socket.destroy();
      resolve({ status: data.split('\r\n')[0], ms: Date.now() - started });
    }, waitMs);
    socket.on('data', (d) => {
      data += d;
      if (data.includes('\r\n')) {
        clearTimeout(timer);
        socket.destroy();
        resolve({ status: data.split('\r\n')[0], ms: Date.now() - started });
      }
    });
    socket.on('error', reject);
  });
}

describe('oversized bodies', () => {
  it('a chunked body over MAX_BODY_BYTES gets 413 and the next request still works', async () => {
    expect(await plainChat()).toBe(200);
    for (let round = 0; round < 3; round++) {
      const chunk = new TextEncoder().encode(' '.repeat(64 * 1024));
      let sent = 0;
      // A stream body has no length: fetch sends it chunked.
      const body = new ReadableStream<Uint8Array>({ pull: (c) => (sent++ < 32 ? c.enqueue(chunk) : c.close()) });
      await expect413(
        await fetch(`${server.url}/v1/chat/completions`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body,
          duplex: 'half',
        } as RequestInit),
      );
      expect(await plainChat(), `round ${round}`).toBe(200);
    }
  });

  it('a declared Content-Length over the limit with the body sent gets 413 and the next request works', async () => {
    for (let round = 0; round < 3; round++) {
      await expect413(
        await fetch(`${server.url}/v1/completions`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: new Uint8Array(3 << 20).fill(32),
        }),
      );
      expect(await plainChat(), `round ${round}`).toBe(200);
    }
  });

  it('a declared Content-Length the client never sends is answered within seconds, not held', async () => {
    const head =
      'POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 1000000000000\r\n\r\n';
    const { status, ms } = await rawStatus(head, JSON.stringify(chat), 10_000);
    expect(status).toBe('HTTP/1.1 413 Payload Too Large');
    expect(ms).toBeLessThan(5000);
    expect(await plainChat()).toBe(200);
  });

  it('a Content-Length under the limit but larger than what is sent: 408 after BODY_READ_TIMEOUT_MS, not held', async () => {
    const body = JSON.stringify(chat);
    const head = `POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: ${body.length + 5000}\r\n\r\n`;
    const { status, ms } = await rawStatus(head, body, 15_000);
    expect(status).toBe('HTTP/1.1 408 Request Timeout');
    expect(ms).toBeGreaterThanOrEqual(1900);
    expect(ms).toBeLessThan(8000);
    expect(await plainChat()).toBe(200);
  });

  it('the hook receiver refuses an oversized body the same way', async () => {
    await expect413(
      await fetch(`${server.url}/v1/hooks/any-hook`, { method: 'POST', body: new Uint8Array(2 << 20).fill(32) }),
    );
    expect(await plainChat()).toBe(200);
  });
});
