// The Responses API end to end: `wrangler dev` (real workerd, real Durable Objects) over real HTTP, driven
// by the official openai client. A response is a session turn: a chain of them continues its KV cache
// (cached_tokens cover the history), is stored in the object's SQLite and survives a restart; responses
// belong to their key; store: false leaves nothing. Bad input gets OpenAI's error shapes.
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startDevServer, type DevServer } from './helpers/wrangler.js';

const KEYS = { alice: 'sk-alice-responses', bob: 'sk-bob-responses' };
const VARS = { API_KEYS: `alice:${KEYS.alice},bob:${KEYS.bob}` };
let server: DevServer;
let alice: OpenAI;
let bob: OpenAI;

const clients = (): void => {
  alice = new OpenAI({ apiKey: KEYS.alice, baseURL: `${server.url}/v1`, maxRetries: 0 });
  bob = new OpenAI({ apiKey: KEYS.bob, baseURL: `${server.url}/v1`, maxRetries: 0 });
};

beforeAll(async () => {
  server = await startDevServer(VARS);
  clients();
});
afterAll(() => server?.stop());

/** The status and OpenAI error body a call failed with. */
async function failure(
  call: Promise<unknown>,
): Promise<{ status: number; error: { code: string; param: string | null } }> {
  try {
    await call;
  } catch (err) {
    if (err instanceof OpenAI.APIError)
      return { status: err.status ?? 0, error: err.error as { code: string; param: string | null } };
    throw err;
  }
  throw new Error('the call succeeded');
}

const turn = (
  input: string,
  previous?: string,
  extra: Partial<OpenAI.Responses.ResponseCreateParamsNonStreaming> = {},
) =>
  alice.responses.create({
    model: 'tiny',
    input,
    // Instructions are not carried over from the previous response (OpenAI's rule): sent each turn, as agents do.
    instructions: 'You are terse.',
    max_output_tokens: 12,
    temperature: 0,
    ...(previous ? { previous_response_id: previous } : {}),
    ...extra,
  });

describe('responses', () => {
  const chain: OpenAI.Responses.Response[] = [];

  it('a chain of five turns: each response continues the cached history and prefills only its input', async () => {
    const inputs = ['Hello!', 'What is a token?', 'And a block?', 'Why cache them?', 'Thanks, bye.'];
    for (const [t, input] of inputs.entries()) {
      const response = await turn(input, chain[t - 1]?.id);
      expect(response.object).toBe('response');
      expect(response.id).toMatch(/^resp_/);
      expect(response.status === 'completed' || response.status === 'incomplete').toBe(true);
      expect(response.output[0].type).toBe('message');
      expect(response.output_text.length).toBeGreaterThan(0);
      chain.push(response);
    }
    for (let t = 1; t < 5; t++) {
      const previous = chain[t - 1].usage!;
      const { usage } = chain[t];
      // Everything the previous response computed is cached: its input and output, less the last sampled token.
      expect(usage!.input_tokens_details.cached_tokens, `turn ${t + 1}`).toBe(
        previous.input_tokens + previous.output_tokens - 1,
      );
      const prefilled = usage!.input_tokens - usage!.input_tokens_details.cached_tokens;
      expect(prefilled).toBeLessThanOrEqual(new TextEncoder().encode(inputs[t]).length + 22);
      expect(usage!.output_tokens_details.reasoning_tokens).toBe(0);
      expect(chain[t].previous_response_id).toBe(chain[t - 1].id);
    }
  });

  it('retrieve gives the stored response; input_items lists its input, newest first', async () => {
    const got = await alice.responses.retrieve(chain[2].id);
    expect(got.id).toBe(chain[2].id);
    expect(got.output).toEqual(chain[2].output);
    expect(got.usage).toEqual(chain[2].usage);
    const items = await alice.responses.inputItems.list(chain[2].id);
    expect(items.data).toHaveLength(1);
    const item = items.data[0] as OpenAI.Responses.ResponseInputMessageItem;
    expect(item.type).toBe('message');
    expect(item.role).toBe('user');
    expect(item.content).toEqual([{ type: 'input_text', text: 'And a block?' }]);
  });

  it("another key's response does not exist for it: 404 on retrieve, delete, input_items and continuing", async () => {
    for (const call of [
      () => bob.responses.retrieve(chain[0].id),
      () => bob.responses.delete(chain[0].id),
      () => bob.responses.inputItems.list(chain[0].id),
      () =>
        bob.responses.create({ model: 'tiny', input: 'hi', previous_response_id: chain[4].id, max_output_tokens: 4 }),
    ]) {
      expect((await failure(call())).status).toBe(404);
    }
    expect((await alice.responses.retrieve(chain[0].id)).id).toBe(chain[0].id);
  });

  it('continuing an older response branches: its history is reused and the other branch stays intact', async () => {
    const branch = await turn('Something else.', chain[1].id);
    expect(branch.previous_response_id).toBe(chain[1].id);
    const history = chain[1].usage!.input_tokens + chain[1].usage!.output_tokens;
    // The full blocks of the shared history come from the cache (only a partial last block may be recomputed).
    expect(branch.usage!.input_tokens_details.cached_tokens).toBeGreaterThanOrEqual(history - 16);
    // The main chain goes on from its own cache, untouched by the branch.
    const next = await turn('Still there?', chain[4].id);
    expect(next.usage!.input_tokens_details.cached_tokens).toBe(
      chain[4].usage!.input_tokens + chain[4].usage!.output_tokens - 1,
    );
    chain.push(next);
  });

  it('streams the documented event sequence, ending with the stored response', async () => {
    const stream = await alice.responses.create({
      model: 'tiny',
      input: 'Tell me more.',
      instructions: 'You are terse.',
      previous_response_id: chain.at(-1)!.id,
      max_output_tokens: 10,
      temperature: 0,
      stream: true,
    });
    const events: OpenAI.Responses.ResponseStreamEvent[] = [];
    for await (const event of stream) events.push(event);
    const types = events.map((e) => e.type);
    expect(types.slice(0, 4)).toEqual([
      'response.created',
      'response.in_progress',
      'response.output_item.added',
      'response.content_part.added',
    ]);
    expect(types.filter((t) => t === 'response.output_text.delta').length).toBeGreaterThan(0);
    expect(types.slice(-4)).toEqual([
      'response.output_text.done',
      'response.content_part.done',
      'response.output_item.done',
      types.at(-1),
    ]);
    expect(['response.completed', 'response.incomplete']).toContain(types.at(-1));
    expect(events.map((e) => e.sequence_number)).toEqual(events.map((_, i) => i));
    const final = (events.at(-1) as OpenAI.Responses.ResponseCompletedEvent).response;
    const deltas = events
      .filter((e): e is OpenAI.Responses.ResponseTextDeltaEvent => e.type === 'response.output_text.delta')
      .map((e) => e.delta)
      .join('');
    const message = final.output[0] as OpenAI.Responses.ResponseOutputMessage;
    expect((message.content[0] as OpenAI.Responses.ResponseOutputText).text).toBe(deltas);
    expect(final.usage!.input_tokens_details.cached_tokens).toBeGreaterThan(0);
    expect((await alice.responses.retrieve(final.id)).output).toEqual(final.output);
    chain.push(final);
  });

  it('function tools: a forced call comes back as a function_call item, and its output continues the chain', async () => {
    const tools: OpenAI.Responses.FunctionTool[] = [
      {
        type: 'function',
        name: 'get_weather',
        description: 'Weather in a city',
        parameters: { type: 'object', properties: { city: { type: 'string', maxLength: 8 } }, required: ['city'] },
        strict: true,
      },
    ];
    const called = await alice.responses.create({
      model: 'tiny',
      input: 'Weather in Paris?',
      tools,
      tool_choice: 'required',
      parallel_tool_calls: false,
      temperature: 1,
      max_output_tokens: 200,
    });
    const call = called.output.find(
      (item) => item.type === 'function_call',
    ) as OpenAI.Responses.ResponseFunctionToolCall;
    expect(call).toBeDefined();
    expect(call.name).toBe('get_weather');
    expect(typeof (JSON.parse(call.arguments) as { city: string }).city).toBe('string');
    expect(called.output.some((item) => item.type === 'message')).toBe(false);
    const answered = await alice.responses.create({
      model: 'tiny',
      previous_response_id: called.id,
      input: [{ type: 'function_call_output', call_id: call.call_id, output: '{"temp": 21}' }],
      tools,
      max_output_tokens: 8,
      temperature: 0,
    });
    expect(answered.usage!.input_tokens_details.cached_tokens).toBe(
      called.usage!.input_tokens + called.usage!.output_tokens - 1,
    );
    const items = await alice.responses.inputItems.list(answered.id);
    expect(items.data[0]).toMatchObject({ type: 'function_call_output', call_id: call.call_id });
  });

  it('text.format json_schema constrains the output through the grammar', async () => {
    const response = await alice.responses.create({
      model: 'tiny',
      input: 'A person, please.',
      text: {
        format: {
          type: 'json_schema',
          name: 'person',
          schema: {
            type: 'object',
            properties: { name: { type: 'string', maxLength: 6 }, age: { type: 'integer', minimum: 0, maximum: 99 } },
            required: ['name', 'age'],
            additionalProperties: false,
          },
          strict: true,
        },
      },
      temperature: 1,
      max_output_tokens: 60,
    });
    const value = JSON.parse(response.output_text) as { name: string; age: number };
    expect(Object.keys(value).sort()).toEqual(['age', 'name']);
    expect(Number.isInteger(value.age)).toBe(true);
  });

  it('new instructions are not carried over: the history is rendered again under them', async () => {
    const other = await turn('Go on.', chain[4].id, { instructions: 'You are verbose.' });
    expect(other.instructions).toBe('You are verbose.');
    const history = chain[4].usage!.input_tokens + chain[4].usage!.output_tokens;
    expect(other.usage!.input_tokens).toBeGreaterThan(history - 4);
    // The system message changed, so little of the cached prefix applies.
    expect(other.usage!.input_tokens_details.cached_tokens).toBeLessThan(16);
  });

  it('metadata and the sampling fields are echoed', async () => {
    const response = await turn('Hi.', undefined, { metadata: { ticket: '42' }, top_p: 0.5 });
    expect(response.metadata).toEqual({ ticket: '42' });
    expect(response.top_p).toBe(0.5);
    expect(response.temperature).toBe(0);
    expect(response.max_output_tokens).toBe(12);
    expect((response as unknown as { store: boolean }).store).toBe(true);
  });

  it('store: false answers and leaves nothing: the response cannot be retrieved or continued', async () => {
    const response = await turn('Forget me.', chain[4].id, { store: false });
    expect((response as unknown as { store: boolean }).store).toBe(false);
    expect(response.usage!.input_tokens_details.cached_tokens).toBeGreaterThan(0);
    expect((await failure(alice.responses.retrieve(response.id))).status).toBe(404);
    const continued = await failure(turn('Remember?', response.id));
    expect(continued.status).toBe(404);
    expect(continued.error.param).toBe('previous_response_id');
  });

  it('bad input: OpenAI error shapes, nothing changed', async () => {
    const unknown = await failure(turn('hi', 'resp_0.doesnotexist0000'));
    expect(unknown).toMatchObject({
      status: 404,
      error: { code: 'response_not_found', param: 'previous_response_id' },
    });
    const both = await failure(
      alice.responses.create({
        model: 'tiny',
        input: 'hi',
        previous_response_id: chain[0].id,
        conversation: 'conv_1',
      }),
    );
    expect(both).toMatchObject({ status: 400, error: { param: 'conversation' } });
    const item = await failure(
      alice.responses.create({
        model: 'tiny',
        input: [{ type: 'no_such_item' } as unknown as OpenAI.Responses.ResponseInputItem],
      }),
    );
    expect(item).toMatchObject({ status: 400, error: { param: 'input[0].type' } });
    const long = await failure(turn('x '.repeat(3000), chain[4].id, { max_output_tokens: 4 }));
    expect(long).toMatchObject({ status: 400, error: { code: 'context_length_exceeded' } });
    const tooMany = await failure(turn('hi', undefined, { max_output_tokens: 0 }));
    expect(tooMany).toMatchObject({ status: 400, error: { param: 'max_output_tokens' } });
    // The chain is as it was.
    expect((await alice.responses.retrieve(chain[4].id)).id).toBe(chain[4].id);
  });

  it('a restart loses nothing: the chain continues from its stored history and restored KV', async () => {
    const last = chain.at(-1)!;
    await server.stop();
    server = await startDevServer(VARS, server.persistDir);
    clients();
    expect((await alice.responses.retrieve(last.id)).output).toEqual(last.output);
    const next = await turn('Back again?', last.id);
    const history = last.usage!.input_tokens + last.usage!.output_tokens;
    expect(next.usage!.input_tokens).toBeGreaterThan(history);
    // A fresh object: the stored blocks (full ones and the partial last one) are restored, not prefilled.
    expect(next.usage!.input_tokens_details.cached_tokens).toBeGreaterThanOrEqual(history - 16);
  });

  it('delete removes a response: then it is 404, and it cannot be continued', async () => {
    const deleted = await alice.responses.delete(chain[0].id);
    expect(deleted).toEqual({ id: chain[0].id, object: 'response', deleted: true });
    expect((await failure(alice.responses.retrieve(chain[0].id))).status).toBe(404);
    expect((await failure(turn('hi', chain[0].id))).status).toBe(404);
    // The rest of the chain is its own: a later response is still there.
    expect((await alice.responses.retrieve(chain[1].id)).id).toBe(chain[1].id);
  });
});
