// The service's response bodies as a client reads them off the wire: what the worker tests look at, typed
// on their own (not imported from the worker), so a test states the shape it expects.

export interface Usage {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
  prompt_tokens_details: { cached_tokens: number };
}

export interface ChatLogprob {
  token: string;
  logprob: number;
  bytes: number[];
  top_logprobs: { token: string; logprob: number; bytes: number[] }[];
}

export interface ChatLogprobs {
  content: ChatLogprob[];
  refusal: null;
}

/** Beside OpenAI's fields on a beam search choice, as vLLM reports them. */
interface BeamFields {
  beam_score?: number;
  cumulative_logprob?: number;
}

export interface ChatCompletion {
  id: string;
  object: 'chat.completion';
  created: number;
  model: string;
  choices: (BeamFields & {
    index: number;
    message: { role: 'assistant'; content: string; refusal: null; tool_calls?: unknown[] };
    logprobs: ChatLogprobs | null;
    finish_reason: string;
  })[];
  usage: Usage;
  system_fingerprint: null;
}

export interface ChatChunk {
  id: string;
  object: 'chat.completion.chunk';
  created: number;
  model: string;
  system_fingerprint: null;
  choices: {
    index: number;
    delta: { role?: 'assistant'; content?: string; tool_calls?: unknown[] };
    logprobs: ChatLogprobs | null;
    finish_reason: string | null;
  }[];
  /** Present (null until the last chunk) only when stream_options.include_usage asked for it. */
  usage?: Usage | null;
}

/** The legacy completions logprobs: parallel arrays, one entry per token. */
export interface CompletionLogprobs {
  tokens: string[];
  token_logprobs: number[];
  top_logprobs: Record<string, number>[];
  text_offset: number[];
}

export interface Completion {
  id: string;
  object: 'text_completion';
  created: number;
  model: string;
  choices: (BeamFields & {
    index: number;
    text: string;
    logprobs: CompletionLogprobs | null;
    finish_reason: string;
    /** vLLM's, when asked: per prompt token (the first: null), its own and its alternatives' entries by id. */
    prompt_logprobs?: (Record<string, { logprob: number; rank: number; decoded_token: string }> | null)[];
  })[];
  usage: Usage;
  system_fingerprint: null;
}

export interface CompletionChunk {
  id: string;
  object: 'text_completion';
  created: number;
  model: string;
  system_fingerprint: null;
  choices: { index: number; text: string; logprobs: CompletionLogprobs | null; finish_reason: string | null }[];
  usage?: Usage | null;
}

export interface Session {
  id: string;
  object: 'session';
  model: string;
  system: string;
  defaults: Record<string, unknown>;
  messages: { role: string; content: string }[];
  tokens: number;
  cached_tokens: number;
  stored_tokens: number;
}
