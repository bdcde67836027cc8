// The Conversations API end to end: `wrangler dev` (real workerd, real Durable Objects) over real HTTP, driven
// by the official openai client. A conversation is a named, mutable session: items are added and deleted, a
// response in it appends its input and output and continues the conversation's KV cache (cached_tokens cover
// the turns before), it survives a restart, it is its key's alone, and it counts against the key's cap.
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startDevServer, type DevServer } from './helpers/wrangler.js';

const KEYS = { alice: 'sk-alice-conversations', bob: 'sk-bob-conversations' };
const VARS = { API_KEYS: `alice:${KEYS.alice},bob:${KEYS.bob}`, SHARD_COUNT: '1', MAX_CONVERSATIONS_PER_KEY: '3' };
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

const say = (conversation: string | { id: string }, input: string) =>
  alice.responses.create({
    model: 'tiny',
    input,
    conversation,
    instructions: 'You are terse.',
    max_output_tokens: 12,
    temperature: 0,
  });

const history = (r: OpenAI.Responses.Response): number => r.usage!.input_tokens + r.usage!.output_tokens;

/** A per-key gauge of /metrics (0 when the key has no line). */
async function keyGauge(name: string, key: string): Promise<number> {
  const res = await fetch(`${server.url}/metrics`, { headers: { authorization: `Bearer ${KEYS.bob}` } });
  const line = (await res.text()).split('\n').find((l) => l.startsWith(`${name}{`) && l.includes(`key="${key}"`));
  return line ? Number(line.split(' ').at(-1)) : 0;
}

const listAll = async (id: string): Promise<OpenAI.Conversations.ConversationItem[]> =>
  (await alice.conversations.items.list(id, { order: 'asc', limit: 100 })).data;

describe('conversations', () => {
  let conversation: OpenAI.Conversations.Conversation;
  const turns: OpenAI.Responses.Response[] = [];
  const long = `Remember these words: ${'apple pear plum fig '.repeat(10)}`;

  it('creates one with items and metadata, retrieves it and updates its metadata', async () => {
    conversation = await alice.conversations.create({
      items: [{ type: 'message', role: 'user', content: 'Hello there.' }],
      metadata: { topic: 'demo' },
    });
    expect(conversation.object).toBe('conversation');
    expect(conversation.id).toMatch(/^conv_/);
    expect(conversation.metadata).toEqual({ topic: 'demo' });
    expect(await alice.conversations.retrieve(conversation.id)).toEqual(conversation);
    const updated = await alice.conversations.update(conversation.id, { metadata: { topic: 'tokens' } });
    expect(updated).toEqual({ ...conversation, metadata: { topic: 'tokens' } });
    expect((await alice.conversations.retrieve(conversation.id)).metadata).toEqual({ topic: 'tokens' });
  });

  it('adds items: they are listed after the first, with ids, and each can be retrieved', async () => {
    const added = await alice.conversations.items.create(conversation.id, {
      items: [
        { type: 'message', role: 'assistant', content: 'Hi! Ask me anything.' },
        { type: 'message', role: 'user', content: long },
      ],
    });
    expect(added.data).toHaveLength(2);
    expect(added.data.map((item) => item.type)).toEqual(['message', 'message']);
    const items = await listAll(conversation.id);
    expect(items).toHaveLength(3);
    expect(items.slice(1)).toEqual(added.data);
    const one = await alice.conversations.items.retrieve(added.data[1].id!, { conversation_id: conversation.id });
    expect(one).toEqual(added.data[1]);
    expect((one as OpenAI.Conversations.Message).content).toEqual([{ type: 'input_text', text: long }]);
  });

  it('a response in it sees its items, is appended to it, and the next turn continues its cache', async () => {
    turns.push(await say(conversation.id, 'What is a token?'));
    // The history was rendered from the items: the long message is part of the prompt.
    expect(turns[0].usage!.input_tokens).toBeGreaterThan(50);
    expect(turns[0].conversation).toEqual({ id: conversation.id });
    turns.push(await say({ id: conversation.id }, 'And a block?'));
    // Everything the first turn computed is cached: its input and output, less the last sampled token.
    expect(turns[1].usage!.input_tokens_details.cached_tokens).toBe(history(turns[0]) - 1);
    // Only the new input is prefilled (the tiny model's tokens are about bytes; the template adds its markers).
    expect(turns[1].usage!.input_tokens - history(turns[0])).toBeLessThanOrEqual(
      new TextEncoder().encode('And a block?').length + 22,
    );
    const items = await listAll(conversation.id);
    expect(items).toHaveLength(7);
    const texts = items.map((item) =>
      item.type === 'message' ? (item.content[0] as { text: string }).text : `(${item.type})`,
    );
    expect(texts.slice(0, 3)).toEqual(['Hello there.', 'Hi! Ask me anything.', long]);
    expect(texts[3]).toBe('What is a token?');
    expect(texts[4]).toBe(turns[0].output_text);
    expect(texts[5]).toBe('And a block?');
    expect(texts[6]).toBe(turns[1].output_text);
    expect(items[4].id).toBe(turns[0].output[0].id);
    // A stored response of a conversation can be retrieved as any response.
    expect((await alice.responses.retrieve(turns[1].id)).conversation).toEqual({ id: conversation.id });
  });

  it('lists newest first by default, and pages with limit and after', async () => {
    const asc = await listAll(conversation.id);
    const first = await alice.conversations.items.list(conversation.id, { limit: 3 });
    expect(first.data.map((item) => item.id)).toEqual(
      asc
        .slice(-3)
        .reverse()
        .map((item) => item.id),
    );
    expect(first.has_more).toBe(true);
    const next = await alice.conversations.items.list(conversation.id, { limit: 3, after: first.data[2].id });
    expect(next.data.map((item) => item.id)).toEqual(
      asc
        .slice(1, 4)
        .reverse()
        .map((item) => item.id),
    );
  });

  it('deleting an item takes it out of what the next response sees', async () => {
    const items = await listAll(conversation.id);
    const longItem = items[2];
    const after = await alice.conversations.items.delete(longItem.id!, { conversation_id: conversation.id });
    expect(after.id).toBe(conversation.id);
    expect(after.object).toBe('conversation');
    expect(
      (await failure(alice.conversations.items.retrieve(longItem.id!, { conversation_id: conversation.id }))).status,
    ).toBe(404);
    expect(await listAll(conversation.id)).toHaveLength(6);
    turns.push(await say(conversation.id, 'Short?'));
    // The long message (40 words) is gone from the prompt: it is shorter than the history before plus the input.
    expect(turns[2].usage!.input_tokens).toBeLessThan(history(turns[1]) - 30);
    // The prompt was rendered again; the cache still served the start before the deleted item.
    expect(turns[2].usage!.input_tokens_details.cached_tokens).toBeGreaterThan(0);
    expect(turns[2].usage!.input_tokens_details.cached_tokens).toBeLessThan(turns[2].usage!.input_tokens);
  });

  it("another key's conversation does not exist for it: 404 everywhere, and it is left as it was", async () => {
    const id = conversation.id;
    const item = (await listAll(id))[0].id!;
    for (const call of [
      () => bob.conversations.retrieve(id),
      () => bob.conversations.update(id, { metadata: { x: 'y' } }),
      () => bob.conversations.delete(id),
      () => bob.conversations.items.list(id),
      () => bob.conversations.items.create(id, { items: [{ type: 'message', role: 'user', content: 'hi' }] }),
      () => bob.conversations.items.retrieve(item, { conversation_id: id }),
      () => bob.conversations.items.delete(item, { conversation_id: id }),
      () => bob.responses.create({ model: 'tiny', input: 'hi', conversation: id, max_output_tokens: 2 }),
    ])
      expect((await failure(call())).status).toBe(404);
    expect((await alice.conversations.retrieve(id)).metadata).toEqual({ topic: 'tokens' });
    expect(await listAll(id)).toHaveLength(8);
  });

  it('bad input: OpenAI error shapes, nothing changed', async () => {
    const both = await failure(
      alice.responses.create({
        model: 'tiny',
        input: 'hi',
        conversation: conversation.id,
        previous_response_id: turns[0].id,
      }),
    );
    expect(both).toMatchObject({ status: 400, error: { param: 'conversation' } });
    expect(await failure(say('conv_0.doesnotexist0000', 'hi'))).toMatchObject({
      status: 404,
      error: { code: 'conversation_not_found', param: 'conversation' },
    });
    const badItem = await failure(
      alice.conversations.items.create(conversation.id, {
        items: [{ type: 'no_such_item' } as unknown as OpenAI.Responses.ResponseInputItem],
      }),
    );
    expect(badItem).toMatchObject({ status: 400, error: { param: 'items[0].type' } });
    const badMetadata = await failure(
      alice.conversations.update(conversation.id, { metadata: { k: 5 } as unknown as Record<string, string> }),
    );
    expect(badMetadata).toMatchObject({ status: 400, error: { param: 'metadata.k' } });
    expect(await listAll(conversation.id)).toHaveLength(8);
    expect((await alice.conversations.retrieve(conversation.id)).metadata).toEqual({ topic: 'tokens' });
  });

  it('a restart loses nothing: items, metadata, and the cache the next response continues', async () => {
    const before = await listAll(conversation.id);
    await server.stop();
    server = await startDevServer(VARS, server.persistDir);
    clients();
    expect(await alice.conversations.retrieve(conversation.id)).toEqual({
      ...conversation,
      metadata: { topic: 'tokens' },
    });
    expect(await listAll(conversation.id)).toEqual(before);
    const next = await say(conversation.id, 'Back again?');
    // A fresh object: the stored blocks (full ones and the partial last one) are restored, not prefilled.
    expect(next.usage!.input_tokens_details.cached_tokens).toBeGreaterThanOrEqual(history(turns[2]) - 16);
    turns.push(next);
  });

  it('a key keeps at most MAX_CONVERSATIONS_PER_KEY; deleting one frees its place and its items', async () => {
    const bytes = await keyGauge('edge_infer_key_stored_conversation_bytes', 'alice');
    // Its items (ten messages) and its token log: more than the long message alone.
    expect(bytes).toBeGreaterThan(long.length);
    const more = [await alice.conversations.create(), await alice.conversations.create()];
    expect(await keyGauge('edge_infer_key_stored_conversations', 'alice')).toBe(3);
    const refused = await failure(alice.conversations.create());
    expect(refused).toMatchObject({ status: 429, error: { code: 'storage_quota_exceeded' } });
    expect((await bob.conversations.create()).id).toMatch(/^conv_/);
    const deleted = await alice.conversations.delete(more[0].id);
    expect(deleted).toEqual({ id: more[0].id, object: 'conversation.deleted', deleted: true });
    expect((await failure(alice.conversations.retrieve(more[0].id))).status).toBe(404);
    expect((await alice.conversations.create()).id).toMatch(/^conv_/);
  });

  it('a deleted conversation is gone: 404 for it, its items and a response in it', async () => {
    await alice.conversations.delete(conversation.id);
    expect((await failure(alice.conversations.retrieve(conversation.id))).status).toBe(404);
    expect((await failure(alice.conversations.items.list(conversation.id))).status).toBe(404);
    expect((await failure(say(conversation.id, 'Hello?'))).status).toBe(404);
  });

  it('store: false in a conversation: the response is not kept, its items are', async () => {
    const other = await alice.conversations.create();
    const unstored = await alice.responses.create({
      model: 'tiny',
      input: 'Not kept?',
      conversation: other.id,
      instructions: 'You are terse.',
      store: false,
      max_output_tokens: 6,
      temperature: 0,
    });
    expect((await failure(alice.responses.retrieve(unstored.id))).status).toBe(404);
    const items = await listAll(other.id);
    expect(items).toHaveLength(2);
    expect((items[0] as OpenAI.Conversations.Message).content).toEqual([{ type: 'input_text', text: 'Not kept?' }]);
    expect(items[1].id).toBe(unstored.output[0].id);
    const next = await say(other.id, 'And now?');
    expect(next.usage!.input_tokens_details.cached_tokens).toBe(history(unstored) - 1);
  });
});
