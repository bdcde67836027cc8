// llama.cpp's WebAssembly build (@wllama/wllama, through scripts/bench/wllama-node.ts) as a test oracle.
// wllama 3.x speaks only llama-server's completion API with text prompts: it has no tokenize call and takes
// no token-id prompts. What the server does offer is enough:
// - a GBNF grammar may name tokens by id (`<[42]>`), so a grammar of exactly those ids makes the server
//   generate them: a list of ids can be fed (as generated tokens) and detokenized (the response's text);
// - prompt caching: a text prompt reuses the cached tokens it shares a prefix with, and the response says how
//   many (timings.cache_n) of how many prompt tokens (usage.prompt_tokens). Caching our ids first and then
//   sending the text tells whether llama.cpp tokenizes the text to exactly our ids, and if not, where the
//   two part.
// The server also keeps earlier prompts' states and resumes from the best match, so a text compared twice
// could match its own earlier tokenization: every comparison starts with a number seen once ("n7"), then
// the separator, then the text.
// llama.cpp's grammar refuses a token that ends inside a UTF-8 character even when it is named by id, so the
// ids fed must be whole characters each (nonUtf8TokenIds lists the others); a text is checked by token count
// alone otherwise. Prompts are tokenized as llama-server does: BOS first when the vocabulary adds one,
// special tokens parsed.
import { loadWllama, type WllamaNode } from '../../scripts/bench/wllama-node.js';

export interface TokenComparison {
  /** llama.cpp's tokenization of the text is exactly the ids given. */
  equal: boolean;
  /** How many leading ids llama.cpp's tokenization shares with the ids given. */
  commonPrefix: number;
  /** How many tokens llama.cpp made of the text. */
  llamaCount: number;
}

export interface LlamaCppOracle {
  /** Compares llama.cpp's tokenization of `text` with `ids` (lead excluded); every id a whole character. */
  compareTokens(text: string, ids: readonly number[]): Promise<TokenComparison>;
  /** How many tokens llama.cpp makes of `text` (lead excluded). */
  countTokens(text: string): Promise<number>;
  /** llama.cpp's text for `ids`, as its server streams a generation of them. */
  detokenize(ids: readonly number[]): Promise<string>;
  /**
   * Greedy continuation of the prompt `ids` (after the lead token): `steps` token ids, never choosing a
   * banned id or a special token (the server's grammar admits no text-less token).
   */
  greedy(ids: readonly number[], steps: number, bannedIds?: readonly number[]): Promise<number[]>;
  exit(): Promise<void>;
}

export interface OracleOptions {
  /**
   * What starts every sequence, as text and id: '' with the BOS id for vocabularies that add BOS (the
   * server puts it first), else a special token such as '<|im_start|>'. Prompts are [lead, ...ids].
   */
  lead: { text: string; id: number };
  /** A special token after a compared text, so its last token is compared too (e.g. '<|im_end|>'). */
  end: { text: string };
  /**
   * A special token that is no end-of-generation token (the grammar cannot feed those), and our
   * tokenizer's encoding of plain text (no BOS): they mark each comparison with a fresh number, see below.
   */
  separator: { text: string; id: number };
  encode: (text: string) => number[];
  /** Context size: lead + the longest sequence + 2. */
  nCtx?: number;
  /** f32 KV (default) so greedy runs compare with a float32 / float64 reference. */
  f32Cache?: boolean;
}

interface Completion {
  choices: {
    text: string;
    logprobs?: { content: { id: number }[] } | null;
  }[];
  usage: { prompt_tokens: number };
  timings: { cache_n: number; prompt_n: number };
}

/** One generated token, held to the text "a": a free one may be half a UTF-8 character, which the server's JSON cannot carry. */
const ONE_TOKEN = { max_tokens: 1, grammar: 'root ::= "a"' };

const forced = (ids: readonly number[]) => ids.map((id) => `<[${id}]>`).join(' ');

export async function loadLlamaCppOracle(ggufPath: string, options: OracleOptions): Promise<LlamaCppOracle> {
  const cache = options.f32Cache === false ? {} : { cache_type_k: 'f32', cache_type_v: 'f32' };
  const node: WllamaNode = await loadWllama(ggufPath, { n_ctx: options.nCtx ?? 4096, ...cache } as never);
  const complete = async (body: Record<string, unknown>): Promise<Completion> =>
    (await node.wllama.createCompletion({
      temperature: 0,
      top_k: 1,
      cache_prompt: true,
      ignore_eos: true,
      ...body,
    } as never)) as unknown as Completion;
  const { lead, end } = options;
  let comparisons = 0;

  return {
    async compareTokens(text, ids) {
      if (ids.length === 0) throw new Error('compareTokens needs at least one id');
      const nonce = `n${++comparisons}`;
      const head = [...options.encode(nonce), options.separator.id];
      // Cache [lead, ...head, ...ids]: the server decodes every generated token but the last, so one more is
      // forced (an ordinary one: a special token in the grammar makes every step several times slower).
      const fed = [...head, ...ids];
      await complete({
        prompt: lead.text,
        grammar: `root ::= ${forced([...fed, ids[0]])}`,
        max_tokens: fed.length + 1,
      });
      const res = await complete({
        prompt: lead.text + nonce + options.separator.text + text + end.text,
        ...ONE_TOKEN,
      });
      const llamaCount = res.usage.prompt_tokens - 2 - head.length; // less lead, head and end
      // The server re-evaluates at least the last prompt token, so a full match reuses lead + head + ids exactly.
      const reused = res.timings.cache_n - 1 - head.length;
      const commonPrefix = Math.max(0, Math.min(reused, ids.length, llamaCount));
      return { equal: llamaCount === ids.length && reused === ids.length, commonPrefix, llamaCount };
    },

    async countTokens(text) {
      const res = await complete({ prompt: lead.text + text + end.text, ...ONE_TOKEN, cache_prompt: false });
      return res.usage.prompt_tokens - 2;
    },

    async detokenize(ids) {
      const res = await complete({
        prompt: lead.text,
        grammar: `root ::= ${forced(ids)}`,
        max_tokens: ids.length,
        cache_prompt: false,
      });
      return res.choices[0].text;
    },

    async greedy(ids, steps, bannedIds = []) {
      const res = await complete({
        prompt: lead.text,
        // After the forced prompt, any text: every token with a text piece (special tokens have none).
        grammar: `root ::= ${ids.length ? `${forced(ids)} ` : ''}free\nfree ::= [^\\x00]*`,
        max_tokens: ids.length + steps,
        cache_prompt: false,
        logprobs: 1,
        post_sampling_probs: true,
        logit_bias: bannedIds.map((id) => [id, false]),
      });
      const got = res.choices[0].logprobs?.content.map((c) => c.id);
      if (!got) throw new Error('wllama: no token ids in the completion (logprobs missing)');
      if (got.slice(0, ids.length).join() !== ids.join()) throw new Error('wllama did not generate the forced prompt');
      return got.slice(ids.length);
    },

    exit: () => node.exit(),
  };
}
