/// <reference types="@cloudflare/vitest-pool-workers/types" />
// Property-based fuzzing of every route, inside workerd, through the worker's own fetch. Requests are
// grown from each route's schema and then broken: wrong types, extreme numbers, huge arrays and maps,
// deep nesting, bad UTF-8, lone surrogates, content-type lies. Every answer must be a 4xx in OpenAI's
// error schema or a valid answer (never a 5xx, never a hang), and after each request a normal request
// still works and the KV gauges are back at their baseline (what the request made, it deletes first).
// Tenants: requests under several keys (and none, and broken ones) at one key's session, hook and job must
// never reach them from another key, every rate-limit header is well formed, and no answer holds a key.
// The seed is fixed and printed; FUZZ_SEED=<n> in the environment replays another one.
import { env } from 'cloudflare:workers';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Env } from '../../src/env.js';
import app from '../../src/worker/app.js';
import { call, scrape, sleep, total } from './service-helpers.js';
import { inbox, newSecret } from './webhook-helpers.js';
import { Webhook } from 'standardwebhooks';

const SEED = Number((env as unknown as { FUZZ_SEED?: string }).FUZZ_SEED ?? 14_2026) || 14_2026;
const RUNS = 15; // per route (9 properties; the generation routes and the tenants' get twice as many): each run is a request, its clean-up and the health checks
const REQUEST_MS = 30_000;

interface FuzzRequest {
  method: string;
  path: string;
  headers: Record<string, string>;
  body?: string | Uint8Array;
  /** Vars of the deployment it is sent to (several keys, limits); none: the test deployment (dev mode). */
  vars?: Partial<Env>;
}

// ---- values -----------------------------------------------------------------------------------

const extremeNumber = fc.constantFrom(
  0,
  -0,
  -1,
  1.5,
  2 ** 31,
  2 ** 53,
  -(2 ** 53),
  2 ** 64,
  1e308,
  -1e308,
  5e-324,
  Number.MAX_SAFE_INTEGER + 2,
);
const weirdString = fc.constantFrom(
  '',
  ' ',
  '\u0000',
  '\ud800',
  '\udfff x \ud83d',
  '\u202e\u200b',
  '💥'.repeat(50),
  'x'.repeat(20_000),
  '{{',
  '{% for %}',
  '__proto__',
  'constructor',
);
/** Anything JSON can hold, weighted toward what breaks naive validators. */
const anyJson: fc.Arbitrary<unknown> = fc.oneof(
  fc.jsonValue({ maxDepth: 3 }),
  { weight: 2, arbitrary: extremeNumber },
  weirdString,
  fc.constantFrom(null, true, false, [], {}, [[]], { type: 'text' }),
);
const smallTokens = fc.integer({ min: 1, max: 6 });
const text = fc.oneof(fc.string({ maxLength: 40 }), fc.string({ unit: 'binary', maxLength: 20 }), weirdString);

/** What a broken field holds: extreme numbers most often, as they reach the deepest checks. */
const broken = fc.oneof(
  { weight: 3, arbitrary: extremeNumber },
  { weight: 1, arbitrary: weirdString },
  { weight: 2, arbitrary: anyJson },
);

/**
 * A body grown from a route's schema: plausible values for some of its fields, then, in half the runs,
 * 1-3 of its fields (or unknown ones) replaced by anything at all; so many runs get past the first check.
 */
function schemaBody(fields: Record<string, fc.Arbitrary<unknown>>): fc.Arbitrary<Record<string, unknown>> {
  const names = Object.keys(fields);
  return fc
    .tuple(
      fc.record(fields, { requiredKeys: [] }),
      fc
        .array(
          fc.tuple(
            fc.oneof(
              { weight: 4, arbitrary: fc.constantFrom(...names) },
              { weight: 1, arbitrary: fc.string({ maxLength: 8 }) },
            ),
            broken,
          ),
          { maxLength: 3 },
        )
        .chain((b) => fc.constantFrom([], b)),
    )
    .map(([body, broken]) => {
      const out: Record<string, unknown> = { ...body };
      for (const [key, value] of broken) out[key] = value;
      return out;
    });
}

const samplingFields = {
  max_tokens: smallTokens,
  temperature: fc.double({ min: 0, max: 2, noNaN: true }),
  top_p: fc.double({ min: 0.01, max: 1, noNaN: true }),
  top_k: fc.integer({ min: -1, max: 600 }),
  min_p: fc.double({ min: 0, max: 1, noNaN: true }),
  frequency_penalty: fc.double({ min: -2, max: 2, noNaN: true }),
  presence_penalty: fc.double({ min: -2, max: 2, noNaN: true }),
  repetition_penalty: fc.double({ min: 0.5, max: 2, noNaN: true }),
  seed: fc.integer(),
  stop: fc.oneof(text, fc.array(text, { maxLength: 4 })),
  stop_token_ids: fc.array(fc.integer({ min: 0, max: 511 }), { maxLength: 4 }),
  ignore_eos: fc.boolean(),
  logit_bias: fc.dictionary(
    fc.integer({ min: 0, max: 511 }).map(String),
    fc.double({ min: -100, max: 100, noNaN: true }),
    { maxKeys: 4 },
  ),
};

const contentArb = fc.oneof(
  text,
  fc.array(fc.record({ type: fc.constant('text'), text }), { minLength: 1, maxLength: 3 }),
);
const messageArb = fc.record({
  role: fc.constantFrom('system', 'developer', 'user', 'assistant'),
  content: contentArb,
});

const chatBody = schemaBody({
  messages: fc.array(messageArb, { minLength: 1, maxLength: 4 }),
  model: fc.constant('tiny'),
  n: fc.integer({ min: 1, max: 3 }),
  stream: fc.boolean(),
  logprobs: fc.boolean(),
  max_completion_tokens: smallTokens,
  response_format: fc.constant({ type: 'text' }),
  ...samplingFields,
}).map((b) => ({ messages: [{ role: 'user', content: 'hi' }], ...b }));

const completionBody = schemaBody({
  prompt: fc.oneof(
    text,
    fc.array(text, { minLength: 1, maxLength: 3 }),
    fc.array(fc.integer({ min: 0, max: 511 }), { minLength: 1, maxLength: 8 }),
  ),
  n: fc.integer({ min: 1, max: 3 }),
  stream: fc.boolean(),
  logprobs: fc.integer({ min: 0, max: 5 }),
  ...samplingFields,
}).map((b) => ({ prompt: 'hi', ...b }));

const defaultsArb = fc.record(samplingFields, { requiredKeys: [] });
const sessionBody = schemaBody({ system: text, model: fc.constant('tiny'), defaults: defaultsArb });
const turnBody = schemaBody({ content: contentArb, stream: fc.boolean(), ...samplingFields }).map((b) => ({
  content: 'hi',
  ...b,
}));

// Stand-ins a test fills in before the runs (URLs and secrets that must be real to get past validation).
const live = { callbackUrl: '', hookSecret: '', hookName: 'fuzz-live', hookId: '' };

const hookBody = schemaBody({
  template: fc.constantFrom(
    'Hi {{ title }}',
    '{{ a.b.c }}',
    '{% for x in items %}{{ x }}{% endfor %}',
    '{{ title | upper }}',
    // Past the render budget: refused per event, not run for seconds.
    '{% for a in range(1000) %}{% for b in range(1000) %}{{ b }}{% endfor %}{% endfor %}',
    '{% for i in range(100000000) %}x{% endfor %}',
  ),
  callback_url: fc.constantFrom('CALLBACK', 'CALLBACK', 'http://169.254.169.254/', 'not a url'),
  secret: fc.constantFrom('SECRET', 'SECRET', 'whsec_', 'plain'),
  params: defaultsArb,
  mode: fc.constantFrom('chat', 'completion'),
}).map((b) => ({
  template: 'Hi {{ title }}',
  ...b,
  callback_url: b.callback_url === undefined || b.callback_url === 'CALLBACK' ? live.callbackUrl : b.callback_url,
  secret: b.secret === undefined || b.secret === 'SECRET' ? live.hookSecret : b.secret,
}));

// ---- bodies and their lies ----------------------------------------------------------------------

/** Big things, made once: each stays under MAX_BODY_BYTES unless it is meant to be over it. */
const huge = {
  deepArray: '['.repeat(100_000) + ']'.repeat(100_000),
  deepObject: `${'{"a":'.repeat(50_000)}1${'}'.repeat(50_000)}`,
  manyMessages: Array.from({ length: 5000 }, (_, i) => ({ role: i % 2 ? 'assistant' : 'user', content: 'm' })),
  manyStops: Array.from({ length: 5000 }, (_, i) => `s${i}`),
  manyBias: Object.fromEntries(Array.from({ length: 5000 }, (_, i) => [String(i), 1])),
  manyIds: Array.from({ length: 100_000 }, (_, i) => i % 512),
  overLimit: ' '.repeat((1 << 20) + 10),
  /** A value nested 5,000 deep, where a schema or default is read recursively. */
  deepValue: JSON.parse('['.repeat(5000) + ']'.repeat(5000)) as unknown,
};

/** A tool the model may call, for outputs the tool-call parser reads on every streamed token. */
const fuzzTool = { type: 'function', function: { name: 'lookup', parameters: { type: 'object' } } };

const badUtf8 = fc.constantFrom(
  [0xff],
  [0xc3, 0x28],
  [0xe2, 0x82],
  [0xf0, 0x90, 0x80],
  [0xed, 0xa0, 0x80],
  [0xc0, 0xaf],
  [0xf8, 0x88, 0x80, 0x80, 0x80],
);

/** Turns a JSON body into what is sent: the JSON, or something near it that is not what it claims. */
function breakBody(json: unknown): fc.Arbitrary<string | Uint8Array> {
  const text = JSON.stringify(json) ?? 'null';
  return fc.oneof(
    { weight: 6, arbitrary: fc.constant(text) },
    { weight: 1, arbitrary: fc.nat({ max: text.length }).map((cut) => text.slice(0, cut)) },
    {
      weight: 1,
      arbitrary: fc.tuple(badUtf8, fc.nat({ max: text.length })).map(([bytes, at]) => {
        const enc = new TextEncoder().encode(text);
        const i = Math.min(at, enc.length);
        return new Uint8Array([...enc.subarray(0, i), ...bytes, ...enc.subarray(i)]);
      }),
    },
    {
      weight: 1,
      arbitrary: fc.constant(
        text.replace(/"(content|prompt|system|template)":"/, '"$1":"\\ud800\\udc00\\udc00\\ud800'),
      ),
    },
    {
      weight: 1,
      arbitrary: fc.constantFrom(
        huge.deepArray,
        huge.deepObject,
        'null',
        '[]',
        '"x"',
        '1e999',
        '',
        'a=1&b=2',
        '\ufeff{}',
        huge.overLimit,
      ),
    },
  );
}

/** Extra fields with huge or deeply nested values, merged into a quarter of the plausible bodies. */
const hugeFields = fc.oneof(
  { weight: 3, arbitrary: fc.constant<Record<string, unknown>>({}) },
  {
    weight: 1,
    arbitrary: fc.constantFrom<Record<string, unknown>>(
      { messages: huge.manyMessages },
      { stop: huge.manyStops },
      { logit_bias: huge.manyBias },
      { prompt: huge.manyIds },
      { stop_token_ids: huge.manyIds },
      { messages: [{ role: 'user', content: JSON.parse('['.repeat(5000) + ']'.repeat(5000)) }] },
      { defaults: { stop: huge.manyStops, logit_bias: huge.manyBias } },
      { tools: [{ type: 'function', function: { name: 'deep', parameters: huge.deepValue } }] },
      { tools: huge.deepValue, defaults: { logit_bias: huge.deepValue } },
      // Long whitespace, forced, with a tool list: the tool-call parser trims it on every token.
      { tools: [fuzzTool], guided_regex: '[ \\n\\t]{0,200}', max_tokens: 64, ignore_eos: true },
      { tools: [fuzzTool], guided_regex: '\\{ {0,200}\\}?', max_tokens: 64, stream: true },
    ),
  },
);

const contentType = fc.constantFrom<string | undefined>(
  'application/json',
  'application/json',
  undefined,
  'text/plain',
  'application/x-www-form-urlencoded',
  'multipart/form-data; boundary=x',
  'application/json; charset=latin1',
  'image/png',
);

function requestFor(
  method: string,
  path: fc.Arbitrary<string>,
  body?: fc.Arbitrary<object>,
): fc.Arbitrary<FuzzRequest> {
  const payload = body
    ? fc.tuple(body, hugeFields).chain(([b, extra]) => breakBody({ ...b, ...extra }))
    : fc.constant(undefined);
  return fc.record({ path, payload, type: contentType }).map(({ path, payload, type }): FuzzRequest => {
    const headers: Record<string, string> = {};
    if (type !== undefined) headers['content-type'] = type;
    return { method, path, headers, body: payload };
  });
}

const idArb = fc.oneof(
  fc.constantFrom(
    '0.abcdefgh',
    '1.0123456789abcdef01234567',
    '999999.abcdefgh',
    '2.abcdefgh',
    '-1.abc',
    '0.',
    '.',
    '%00',
    '0.abcdefgh/../../metrics',
    '1e3.abcdefgh',
  ),
  fc.string({ maxLength: 20 }).map(encodeURIComponent),
);

// ---- tenants: several keys, one of which owns a session, a hook and a job ----------------------------

/** Part of every key below: no answer may contain it. */
const SECRET_PART = 'sk-fuzz';
const TENANT_VARS: Partial<Env> = {
  API_KEYS: 'fuzz-a:sk-fuzz-a, fuzz-b:sk-fuzz-b, sk-fuzz-bare',
  RATE_LIMITS: JSON.stringify({
    default: { rpm: 1000, tpm: 100_000, concurrent: 8 },
    'fuzz-b': { rpm: 2, tpm: 30, concurrent: 1 },
  }),
};
/** What key A owns (made before the runs); other keys must never reach it. */
const owned = { session: '', hook: 'fuzz-owned', hookId: '', callbackUrl: '', job: '' };

function asKey(authorization: string, method: string, path: string, body?: unknown): Promise<Response> {
  return send({
    method,
    path,
    headers: { authorization, 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
    vars: TENANT_VARS,
  });
}

async function setUpTenants(): Promise<void> {
  const a = 'Bearer sk-fuzz-a';
  const session = await asKey(a, 'POST', '/v1/sessions', { defaults: { max_tokens: 2 } });
  owned.session = ((await session.json()) as { id: string }).id;
  const secret = newSecret();
  owned.callbackUrl = (await inbox(secret)).url;
  const hook = await asKey(a, 'PUT', `/v1/hooks/${owned.hook}`, {
    template: 'Hi {{ title }}',
    callback_url: owned.callbackUrl,
    secret,
    params: { max_tokens: 2 },
  });
  owned.hookId = ((await hook.json()) as { id: string }).id;
  const body = '{"title":"owned"}';
  const id = `msg_${crypto.randomUUID()}`;
  const when = new Date();
  const event = await send({
    method: 'POST',
    path: `/v1/hooks/${owned.hookId}`,
    headers: {
      'webhook-id': id,
      'webhook-timestamp': String(Math.floor(+when / 1000)),
      'webhook-signature': new Webhook(secret).sign(id, when, body),
    },
    body,
    vars: TENANT_VARS,
  });
  owned.job = ((await event.json()) as { job_id: string }).job_id;
  for (const v of Object.values(owned)) expect(v).not.toBe('');
}

/** A's session, hook and job are still there, as A made them. */
async function ownedIntact(): Promise<void> {
  const a = 'Bearer sk-fuzz-a';
  expect((await asKey(a, 'GET', `/v1/sessions/${owned.session}`)).status).toBe(200);
  const hook = (await (await asKey(a, 'GET', `/v1/hooks/${owned.hook}`)).json()) as Record<string, unknown>;
  expect(hook).toMatchObject({ id: owned.hookId, callback_url: owned.callbackUrl, key_name: 'fuzz-a' });
  expect((await asKey(a, 'GET', `/v1/jobs/${owned.job}`)).status).toBe(200);
}

const authArb = fc.constantFrom<string | undefined>(
  undefined,
  'Bearer sk-fuzz-a',
  'Bearer sk-fuzz-b',
  'Bearer sk-fuzz-b',
  'Bearer sk-fuzz-bare',
  'bearer sk-fuzz-b',
  'Bearer fuzz-b:sk-fuzz-b',
  'Bearer sk-fuzz-b sk-fuzz-a',
  'Basic sk-fuzz-a',
  'Bearer ',
  'Bearer  sk-fuzz-b ',
  'Bearer sk-fuzz-A',
);
const B = { authorization: 'Bearer sk-fuzz-b' };
const isKeyA = (auth: string | undefined): boolean => /^bearer\s+sk-fuzz-a\s*$/i.test(auth ?? '');

/** Requests at A's things and at the generation routes, under any of the keys above (or none). */
const tenantRequest: fc.Arbitrary<FuzzRequest> = fc
  .tuple(
    fc.oneof(
      requestFor('GET', fc.constant('/v1/sessions/SESSION')),
      requestFor('DELETE', fc.constant('/v1/sessions/SESSION')),
      requestFor('POST', fc.constant('/v1/sessions/SESSION/messages'), turnBody),
      requestFor('GET', fc.constant('/v1/jobs/JOB')),
      requestFor('GET', fc.constant('/v1/hooks/HOOK')),
      requestFor('DELETE', fc.constant('/v1/hooks/HOOK')),
      requestFor('PUT', fc.constant('/v1/hooks/HOOK'), hookBody),
      requestFor('POST', fc.constant('/v1/chat/completions'), chatBody),
      requestFor('POST', fc.constant('/v1/completions'), completionBody),
      requestFor('POST', fc.constant('/v1/sessions'), sessionBody),
      requestFor('GET', fc.constantFrom('/metrics', '/v1/models')),
      // Plain requests under B's key, often enough to run into its limits (rpm 2, tpm 30, one at a time).
      {
        weight: 6,
        arbitrary: fc.constantFrom<FuzzRequest>(
          { method: 'POST', path: '/v1/completions', headers: B, body: '{"prompt":"hi","max_tokens":4}' },
          { method: 'POST', path: '/v1/completions', headers: B, body: '{"prompt":"x","stream":true}' },
          {
            method: 'POST',
            path: '/v1/chat/completions',
            headers: B,
            body: '{"messages":[{"role":"user","content":"x"}]}',
          },
        ),
      },
    ),
    authArb,
  )
  .map(([req, auth]): FuzzRequest => {
    // A may read its own things; deleting, replacing or continuing them (a turn keeps its KV blocks, which the
    // gauges would see) is left to the other properties.
    const destructive = req.method === 'DELETE' || req.method === 'PUT' || req.path.endsWith('/messages');
    const authorization = req.headers.authorization ?? (destructive && isKeyA(auth) ? B.authorization : auth);
    const path = req.path.replace('SESSION', owned.session).replace('JOB', owned.job).replace('HOOK', owned.hook);
    const headers = { ...req.headers, ...(authorization === undefined ? {} : { authorization }) };
    return { ...req, path, headers, vars: TENANT_VARS };
  });

/** One tenant request: never a 2xx (or a 409 that would say it exists) for another key on A's things. */
async function checkTenant(req: FuzzRequest): Promise<void> {
  const result = await exchange(req);
  const auth = req.headers.authorization;
  const atOwned =
    req.path.includes(owned.session) || req.path.includes(owned.job) || req.path === `/v1/hooks/${owned.hook}`;
  // B's PUT of A's hook name makes B's own hook of that name: allowed, and deleted again below.
  const ownNamespace = req.method === 'PUT';
  if (atOwned && !isKeyA(auth) && !ownNamespace) {
    expect(result.status, `${req.method} ${req.path} as ${auth}`).not.toBeLessThan(300);
    expect(result.status).not.toBe(409);
  }
  const body = result.json as { id?: string; object?: string } | null;
  if (auth !== undefined && result.status < 300) {
    if (req.method === 'PUT') await asKey(auth, 'DELETE', req.path);
    if (req.path === '/v1/sessions' && body?.id) await asKey(auth, 'DELETE', `/v1/sessions/${body.id}`);
  }
  await ownedIntact();
  await healthy();
}

// ---- one exchange and the invariants after it ------------------------------------------------------

function timeout<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: ReturnType<typeof setTimeout>;
  return Promise.race([
    promise,
    new Promise<never>(
      (_, reject) => (timer = setTimeout(() => reject(new Error(`hang: ${what} took over ${ms} ms`)), ms)),
    ),
  ]).finally(() => clearTimeout(timer));
}

function send(req: FuzzRequest): Promise<Response> {
  const init = { method: req.method, headers: req.headers, body: req.body as BodyInit | undefined };
  if (!req.vars) return call(req.path, init);
  const deployment = { ...(env as unknown as Env), ...req.vars };
  return Promise.resolve(app.fetch(new Request(`http://edge-infer.test${req.path}`, init), deployment));
}

const DURATION = /^(\d+ms|\d+(\.\d+)?s|\d+m\d+(\.\d+)?s)$/;

/** x-ratelimit-* headers, where present, are whole numbers and durations that agree; a rate-limit 429 says when to retry. */
function checkRateLimitHeaders(res: Response, code: string | undefined, what: string): void {
  for (const kind of ['requests', 'tokens']) {
    const limit = res.headers.get(`x-ratelimit-limit-${kind}`);
    const remaining = res.headers.get(`x-ratelimit-remaining-${kind}`);
    const reset = res.headers.get(`x-ratelimit-reset-${kind}`);
    if (limit === null) {
      expect([remaining, reset], what).toEqual([null, null]);
      continue;
    }
    expect(limit, what).toMatch(/^[1-9]\d*$/);
    expect(remaining, what).toMatch(/^\d+$/);
    expect(Number(remaining), what).toBeLessThanOrEqual(Number(limit));
    expect(reset, what).toMatch(DURATION);
  }
  if (code === 'rate_limit_exceeded' || code === 'concurrency_limit_exceeded') {
    expect(res.status, what).toBe(429);
    expect(res.headers.get('retry-after'), what).toMatch(/^[1-9]\d*$/);
    expect(res.headers.get('retry-after-ms'), what).toMatch(/^[1-9]\d*$/);
  }
}

/** Sends `req`, and checks the answer is a 4xx in OpenAI's error schema or a well-formed success. */
async function exchange(req: FuzzRequest): Promise<{ status: number; json: unknown }> {
  const what = `${req.method} ${req.path}`;
  const res = await timeout(send(req), REQUEST_MS, what);
  const text = await timeout(res.text(), REQUEST_MS, `${what} body`);
  // No answer, body or header, ever holds a key.
  expect(text, what).not.toContain(SECRET_PART);
  res.headers.forEach((value, name) => {
    expect(`${name}: ${value}`, what).not.toContain(SECRET_PART);
  });
  const code = res.status >= 400 ? /"code":"([a-z_]+)"/.exec(text)?.[1] : undefined;
  tally(
    `${req.vars ? '[keys] ' : ''}${req.method} ${req.path.replace(/^\/v1\/(sessions|jobs|hooks|models)\/[^/]+/, '/v1/$1/:id')}`,
    code ? `${res.status} ${code}` : String(res.status),
  );
  checkRateLimitHeaders(res, code, what);
  expect(res.status, `${what} → ${res.status} ${text.slice(0, 300)}`).toBeLessThan(500);
  expect(res.status).toBeGreaterThanOrEqual(200);
  const type = res.headers.get('content-type') ?? '';
  if (res.status >= 400) {
    const body = JSON.parse(text) as { error: Record<string, unknown> };
    expect(Object.keys(body.error).sort(), text).toEqual(['code', 'message', 'param', 'type']);
    expect(body.error.type).not.toBe('server_error');
    return { status: res.status, json: body };
  }
  if (type.startsWith('text/event-stream')) {
    const events = text
      .split('\n\n')
      .filter((e) => e.startsWith('data: '))
      .map((e) => e.slice(6));
    const last = events.at(-1);
    if (last !== '[DONE]') {
      // A stream that fails after it began ends with an error event instead; never a server error.
      const error = (JSON.parse(last ?? '{}') as { error?: { type: string } }).error;
      expect(error, `${what}: stream ended without [DONE] or an error: ${text.slice(-300)}`).toBeDefined();
      expect(error!.type, text.slice(-300)).not.toBe('server_error');
    }
    for (const e of events.slice(0, -1)) JSON.parse(e);
    return { status: res.status, json: null };
  }
  if (type.startsWith('application/json')) return { status: res.status, json: JSON.parse(text) };
  // /metrics is Prometheus text; GET / is the playground page.
  expect(type, what).toMatch(what === 'GET /' ? /^text\/html/ : /^text\/plain/);
  return { status: res.status, json: null };
}

let baseline: { used: number };

/** Statuses seen per route, printed at the end: a fuzz run that never reached a 200 proves little. */
const seen = new Map<string, Map<string, number>>();
function tally(route: string, status: string): void {
  const counts = seen.get(route) ?? new Map<string, number>();
  counts.set(status, (counts.get(status) ?? 0) + 1);
  seen.set(route, counts);
}

async function gauges(): Promise<{ used: number; running: number; queued: number }> {
  const m = await scrape();
  return {
    used: total(m, 'edge_infer_kv_blocks_used'),
    running: total(m, 'edge_infer_running_requests'),
    queued: total(m, 'edge_infer_queue_depth'),
  };
}

/** A normal request works, and nothing is left holding KV blocks, running or queued. */
async function healthy(): Promise<void> {
  const res = await timeout(
    call('/v1/chat/completions', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ messages: [{ role: 'user', content: 'ok?' }], max_tokens: 1 }),
    }),
    REQUEST_MS,
    'health check',
  );
  expect(res.status, await res.clone().text()).toBe(200);
  await res.arrayBuffer();
  const deadline = Date.now() + 5000;
  for (;;) {
    const now = await gauges();
    if (now.used === baseline.used && now.running === 0 && now.queued === 0) return;
    if (Date.now() > deadline)
      expect(now, 'KV gauges back at baseline').toEqual({ used: baseline.used, running: 0, queued: 0 });
    await sleep(25);
  }
}

/** What a request created (sessions, hooks, jobs) is deleted or finished before the gauges are read. */
async function cleanUp(req: FuzzRequest, result: { status: number; json: unknown }): Promise<void> {
  const body = result.json as { id?: string; job_id?: string; object?: string } | null;
  if (req.method === 'POST' && req.path === '/v1/sessions' && result.status === 201 && body?.id) {
    expect((await call(`/v1/sessions/${body.id}`, { method: 'DELETE' })).status).toBe(200);
  }
  if (req.method === 'PUT' && req.path.startsWith('/v1/hooks/') && result.status < 300) {
    await call(req.path, { method: 'DELETE' });
  }
  if (body?.job_id) {
    const deadline = Date.now() + 20_000;
    for (;;) {
      const job = (await (await call(`/v1/jobs/${body.job_id}`)).json()) as { status: string };
      if (job.status === 'delivered' || job.status === 'failed') break;
      if (Date.now() > deadline) throw new Error(`job ${body.job_id} did not settle: ${JSON.stringify(job)}`);
      await sleep(50);
    }
  }
}

async function check(req: FuzzRequest): Promise<void> {
  const result = await exchange(req);
  await cleanUp(req, result);
  await healthy();
}

/** Counterexamples can be a megabyte: fast-check prints this short form of them instead. */
function printable(req: FuzzRequest): FuzzRequest {
  const body =
    typeof req.body === 'string' ? req.body : req.body && `bytes ${JSON.stringify([...req.body.subarray(0, 300)])}`;
  const short = JSON.stringify({
    ...req,
    body: body && (body.length > 600 ? `${body.slice(0, 600)}… (${body.length} chars)` : body),
  });
  return Object.assign(req, { [fc.toStringMethod]: () => short });
}

const options = { seed: SEED, numRuns: RUNS, endOnFailure: true };
const property = (arb: fc.Arbitrary<FuzzRequest>, numRuns = RUNS) =>
  fc.assert(fc.asyncProperty(arb.map(printable), check), { ...options, numRuns });

// ---- the routes ------------------------------------------------------------------------------------

describe(`fuzz every route (seed ${SEED}, ${RUNS}-${2 * RUNS} runs each)`, () => {
  beforeAll(async () => {
    console.log(
      `fuzz seed: ${SEED} (FUZZ_SEED=<n> npx vitest run --project workers test/workers/fuzz.test.ts replays another)`,
    );
    live.hookSecret = newSecret();
    live.callbackUrl = (await inbox(live.hookSecret)).url;
    const put = await call(`/v1/hooks/${live.hookName}`, {
      method: 'PUT',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        template: 'Hi {{ title }}',
        callback_url: live.callbackUrl,
        secret: live.hookSecret,
        params: { max_tokens: 2 },
      }),
    });
    const putText = await put.text();
    expect(put.status, putText).toBeLessThan(300);
    live.hookId = (JSON.parse(putText) as { id: string }).id;
    await setUpTenants();
    const warm = await call('/v1/completions', {
      method: 'POST',
      body: JSON.stringify({ prompt: 'warm', max_tokens: 1 }),
    });
    await warm.arrayBuffer();
    baseline = { used: (await gauges()).used };
  });

  afterAll(() => {
    const lines = [...seen].sort().map(
      ([route, counts]) =>
        `  ${route}: ${[...counts]
          .sort()
          .map(([s, n]) => `${s}×${n}`)
          .join(' ')}`,
    );
    console.log(`fuzz statuses (seed ${SEED}):\n${lines.join('\n')}`);
  });

  it('POST /v1/chat/completions', () =>
    property(requestFor('POST', fc.constant('/v1/chat/completions'), chatBody), 2 * RUNS));

  it('POST /v1/completions', () =>
    property(requestFor('POST', fc.constant('/v1/completions'), completionBody), 2 * RUNS));

  it('POST /v1/sessions', () => property(requestFor('POST', fc.constant('/v1/sessions'), sessionBody)));

  it('POST /v1/sessions/:id/messages (a fresh session each run, deleted after)', async () => {
    await fc.assert(
      fc.asyncProperty(
        requestFor('POST', fc.constant('/v1/sessions/SESSION/messages'), turnBody).map(printable),
        fc.boolean(),
        async (req, withDefaults) => {
          const made = await call('/v1/sessions', {
            method: 'POST',
            body: JSON.stringify(
              withDefaults ? { system: 'Fuzz.', defaults: { max_tokens: 3 } } : { defaults: { max_tokens: 3 } },
            ),
          });
          const { id } = (await made.json()) as { id: string };
          try {
            await exchange({ ...req, path: req.path.replace('SESSION', id) });
            // The session survived whatever was sent: it still answers a normal turn.
            const turn = await call(`/v1/sessions/${id}/messages`, {
              method: 'POST',
              body: JSON.stringify({ content: 'still there?', max_tokens: 1 }),
            });
            expect(turn.status, await turn.clone().text()).toBe(200);
            await turn.arrayBuffer();
          } finally {
            expect((await call(`/v1/sessions/${id}`, { method: 'DELETE' })).status).toBe(200);
          }
          await healthy();
        },
      ),
      options,
    );
  });

  it('GET and DELETE /v1/sessions/:id, GET /v1/jobs/:id (forged and malformed ids)', () =>
    property(
      fc
        .tuple(fc.constantFrom('GET', 'DELETE', 'POST'), fc.constantFrom('/v1/sessions/', '/v1/jobs/'), idArb)
        .map(([method, base, id]) => ({
          method,
          path: base + id,
          headers: {},
          body: method === 'POST' ? '{}' : undefined,
        })),
    ));

  it('PUT, GET, DELETE /v1/hooks/:name', () =>
    property(
      fc
        .tuple(
          fc.constantFrom('PUT', 'PUT', 'GET', 'DELETE'),
          fc.oneof(
            fc.constant('fuzz-hook'),
            fc.constantFrom('hk_fuzz', 'hk_0.0123456789abcdef01234567'),
            fc.string({ maxLength: 70 }).map(encodeURIComponent),
          ),
        )
        .chain(([method, name]) =>
          requestFor(method, fc.constant(`/v1/hooks/${name || 'x'}`), method === 'PUT' ? hookBody : undefined),
        ),
    ));

  it('POST /v1/hooks/:name (inbound events, signed and not)', () =>
    property(
      fc
        .tuple(
          requestFor(
            'POST',
            fc.constantFrom(
              `/v1/hooks/${live.hookName}`,
              `/v1/hooks/${live.hookName}`,
              'HOOK_ID',
              'HOOK_ID',
              '/v1/hooks/no-such-hook',
              '/v1/hooks/hk_0.0123456789abcdef01234567',
              '/v1/hooks/hk_999.0123456789abcdef01234567',
              '/v1/hooks/hk_',
            ),
            schemaBody({ title: text, items: fc.array(text, { maxLength: 3 }) }),
          ),
          fc.constantFrom('valid', 'valid', 'bad-signature', 'stale', 'none', 'garbage'),
        )
        .map(([req, how]) => {
          const id = `msg_${crypto.randomUUID()}`;
          const raw = typeof req.body === 'string' ? req.body : new TextDecoder().decode(req.body ?? new Uint8Array());
          const when = how === 'stale' ? new Date(Date.now() - 3600_000) : new Date();
          const wh = new Webhook(live.hookSecret);
          const headers: Record<string, string> =
            how === 'none'
              ? {}
              : how === 'garbage'
                ? { 'webhook-id': 'x'.repeat(500), 'webhook-timestamp': '1e400', 'webhook-signature': 'v1,!!! v2,x ,' }
                : {
                    'webhook-id': id,
                    'webhook-timestamp': String(Math.floor(+when / 1000)),
                    'webhook-signature':
                      how === 'bad-signature' ? `v1,${btoa('x'.repeat(32))}` : wh.sign(id, when, raw),
                  };
          // A signed body is sent as the exact text that was signed.
          return {
            ...req,
            path: req.path === 'HOOK_ID' ? `/v1/hooks/${live.hookId}` : req.path,
            headers: { ...req.headers, ...headers },
            body: how === 'valid' || how === 'stale' ? raw : req.body,
          };
        }),
    ));

  it("several keys and limits: another key's requests never reach a key's session, hook or job", () =>
    fc.assert(fc.asyncProperty(tenantRequest.map(printable), checkTenant), { ...options, numRuns: 2 * RUNS }));

  it('GET /v1/models, /v1/models/:id, /metrics, and unknown routes and methods', () =>
    property(
      fc.oneof(
        fc
          .constantFrom('/v1/models', '/metrics', '/', '/v1/models/tiny')
          .map((path) => ({ method: 'GET', path, headers: {} })),
        idArb.map((id) => ({ method: 'GET', path: `/v1/models/${id}`, headers: {} })),
        fc
          .tuple(
            fc.constantFrom('PATCH', 'PUT', 'DELETE', 'OPTIONS', 'POST'),
            fc.constantFrom('/v1/models', '/metrics', '/v1/chat/completions', '/v1/nope', '/v2', '/v1/jobs'),
          )
          .map(([method, path]) => ({
            method,
            path,
            headers: { 'content-type': 'application/json' },
            body: method === 'POST' || method === 'PUT' || method === 'PATCH' ? '{}' : undefined,
          })),
      ),
    ));
});
