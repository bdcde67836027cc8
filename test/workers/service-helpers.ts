// Talking to the service inside workerd the way a client would: through the main worker's fetch.
import { exports } from 'cloudflare:workers';
import { createParser, type EventSourceMessage } from 'eventsource-parser';
import { expect } from 'vitest';

const worker = (exports as unknown as { default: Fetcher }).default;
const BASE = 'http://edge-infer.test';

export function call(path: string, init: RequestInit = {}): Promise<Response> {
  return worker.fetch(`${BASE}${path}`, init);
}

export function post(path: string, body: unknown, headers: Record<string, string> = {}): Promise<Response> {
  return call(path, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
}

/** POSTs and returns the JSON body, checking the status first (the body is in the failure message). */
export async function postJson<T = unknown>(
  path: string,
  body: unknown,
  status = 200,
  headers: Record<string, string> = {},
): Promise<T> {
  const res = await post(path, body, headers);
  const text = await res.text();
  expect(res.status, text).toBe(status);
  return JSON.parse(text) as T;
}

/** Reads a whole SSE response: the JSON data of every event, and whether it ended with [DONE]. */
export async function readSse<T = unknown>(res: Response): Promise<{ events: T[]; done: boolean }> {
  expect(res.status).toBe(200);
  expect(res.headers.get('content-type')).toMatch(/^text\/event-stream/);
  const events: T[] = [];
  let done = false;
  const parser = createParser({
    onEvent(message: EventSourceMessage) {
      expect(done, 'nothing may follow [DONE]').toBe(false);
      if (message.data === '[DONE]') done = true;
      else events.push(JSON.parse(message.data) as T);
    },
  });
  const decoder = new TextDecoder();
  for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>)
    parser.feed(decoder.decode(chunk, { stream: true }));
  return { events, done };
}

/** An OpenAI error body with the given status, type and param. */
export async function expectError(
  res: Response,
  status: number,
  param?: string | null,
  code?: string,
): Promise<{ message: string; type: string; param: string | null; code: string | null }> {
  const text = await res.text();
  expect(res.status, text).toBe(status);
  expect(res.headers.get('content-type')).toMatch(/^application\/json/);
  const body = JSON.parse(text) as {
    error: { message: string; type: string; param: string | null; code: string | null };
  };
  expect(Object.keys(body)).toEqual(['error']);
  expect(Object.keys(body.error).sort()).toEqual(['code', 'message', 'param', 'type']);
  expect(typeof body.error.message).toBe('string');
  expect(typeof body.error.type).toBe('string');
  if (param !== undefined) expect(body.error.param).toBe(param);
  if (code !== undefined) expect(body.error.code).toBe(code);
  return body.error;
}

/** GET /metrics parsed into `name{labels}` → value. */
export async function scrape(): Promise<Map<string, number>> {
  const res = await call('/metrics');
  expect(res.status).toBe(200);
  const out = new Map<string, number>();
  for (const line of (await res.text()).split('\n')) {
    if (line === '' || line.startsWith('#')) continue;
    const at = line.lastIndexOf(' ');
    out.set(line.slice(0, at), Number(line.slice(at + 1)));
  }
  return out;
}

/** Sum of a metric over all shards (and other labels). */
export function total(metrics: Map<string, number>, name: string): number {
  let sum = 0;
  for (const [key, value] of metrics) if (key === name || key.startsWith(`${name}{`)) sum += value;
  return sum;
}

export const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));
