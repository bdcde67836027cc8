// Clients that go away mid-stream against real `wrangler dev`: each cut cancels its generation quietly (our
// code logs nothing for an expected disconnect), the KV gauges return, and the next client is served. The
// one line workerd itself prints when a write to a departed client fails ("Uncaught Error: Network
// connection lost.", no stack) is not ours to silence (README, Hardening) and is the only one allowed.
import { request } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startDevServer, type DevServer } from './helpers/wrangler.js';

let server: DevServer;
beforeAll(async () => {
  server = await startDevServer();
});
afterAll(() => server?.stop());

async function metric(name: string): Promise<number> {
  const text = await (await fetch(`${server.url}/metrics`)).text();
  let sum = 0;
  for (const line of text.split('\n')) {
    const m = /^([a-z_]+)(\{[^}]*\})? ([-0-9.e+]+)$/.exec(line);
    if (m && m[1] === name) sum += Number(m[3]);
  }
  return sum;
}

/**
 * A streamed chat over a raw socket; with `cutAfterChunks` the socket is destroyed mid-answer, after that many
 * chunks have arrived (counted, not timed: the edge kernels can finish 400 tiny tokens before a timer fires).
 */
function stream(i: number, cutAfterChunks?: number): Promise<'ended' | 'cut'> {
  return new Promise((resolve, reject) => {
    const body = JSON.stringify({
      messages: [{ role: 'user', content: `Talk, number ${i}.` }],
      max_tokens: 400,
      ignore_eos: true,
      stream: true,
    });
    const req = request(
      `${server.url}/v1/chat/completions`,
      { method: 'POST', headers: { 'content-type': 'application/json' } },
      (res) => {
        let chunks = 0;
        res.on('data', () => {
          if (cutAfterChunks !== undefined && ++chunks === cutAfterChunks) {
            req.destroy();
            resolve('cut');
          }
        });
        res.on('end', () => resolve('ended'));
      },
    );
    req.on('error', (err) => (cutAfterChunks !== undefined ? resolve('cut') : reject(err)));
    req.end(body);
  });
}

describe('client disconnects', () => {
  it('cut streams cancel quietly, free their blocks, and the service goes on', async () => {
    await stream(-1);
    const before = server.log().length;
    const outcomes = await Promise.all(
      Array.from({ length: 24 }, (_, i) => stream(i, i % 3 === 0 ? 1 + ((i * 7) % 4) : undefined)),
    );
    expect(outcomes.filter((o) => o === 'cut').length).toBe(8);
    const deadline = Date.now() + 15_000;
    while ((await metric('edge_infer_kv_blocks_used')) !== 0 || (await metric('edge_infer_running_requests')) !== 0) {
      if (Date.now() > deadline) throw new Error('KV blocks or running requests did not return to 0');
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    expect(await stream(100)).toBe('ended');
    await new Promise((resolve) => setTimeout(resolve, 500)); // let the log catch up
    const log = server.log().slice(before);
    const ours = log
      .split('\n')
      .filter(
        (l) =>
          /ERROR|error|Uncaught|not disposed/.test(l) &&
          !/Uncaught Error: Network connection lost\.\s*(\S*\[0m)?\s*$/.test(l),
      );
    expect(ours, log.slice(-3000)).toEqual([]);
  });
});
