import { eachKey, eachStoredKey } from './readers.js';
import type { MetricDefinition, Sample } from './metric.js';

/** Per key name (never a key): usage, what the rate limiter counts and refuses, what the key keeps in storage. */
export const KEY_METRICS: MetricDefinition[] = [
  {
    name: 'edge_infer_key_requests_total',
    type: 'counter',
    help: 'Finished requests per key name (a request with n choices counts once).',
    samples: eachKey((k) => k.requests),
  },
  {
    name: 'edge_infer_key_prompt_tokens_total',
    type: 'counter',
    help: 'Prompt tokens of finished requests per key name.',
    samples: eachKey((k) => k.promptTokens),
  },
  {
    name: 'edge_infer_key_completion_tokens_total',
    type: 'counter',
    help: 'Tokens generated per key name.',
    samples: eachKey((k) => k.completionTokens),
  },
  {
    name: 'edge_infer_key_cached_tokens_total',
    type: 'counter',
    help: 'Prompt tokens served from the KV cache per key name.',
    samples: eachKey((k) => k.cachedTokens),
  },
  {
    name: 'edge_infer_key_rate_limited_total',
    type: 'counter',
    help: "Requests refused with 429 per key name and limit (requests, tokens, concurrent): this shard's share of RATE_LIMITS.",
    samples: ({ shards }) =>
      shards.flatMap(({ labels, stats }) =>
        Object.entries(stats.keys ?? {}).flatMap(([key, k]) =>
          Object.entries(k.refused ?? {}).map(([limit, v]): Sample => [{ ...labels, key, limit }, v]),
        ),
      ),
  },
  {
    name: 'edge_infer_key_stored_sessions',
    type: 'gauge',
    help: 'Sessions a key keeps on the shard (what MAX_SESSIONS_PER_KEY caps).',
    samples: eachStoredKey((u) => u.sessions),
  },
  {
    name: 'edge_infer_key_stored_session_bytes',
    type: 'gauge',
    help: "Bytes of a key's sessions on the shard: system prompts, transcripts, token logs and defaults.",
    samples: eachStoredKey((u) => u.sessionBytes),
  },
  {
    name: 'edge_infer_key_stored_conversations',
    type: 'gauge',
    help: 'Conversations a key keeps on the shard (what MAX_CONVERSATIONS_PER_KEY caps).',
    samples: eachStoredKey((u) => u.conversations),
  },
  {
    name: 'edge_infer_key_stored_conversation_bytes',
    type: 'gauge',
    help: "Bytes of a key's conversations on the shard: items, metadata and token logs (what MAX_CONVERSATION_MB_PER_KEY caps).",
    samples: eachStoredKey((u) => u.conversationBytes),
  },
  {
    name: 'edge_infer_key_hooks',
    type: 'gauge',
    help: 'Hooks a key keeps on the shard (what MAX_HOOKS_PER_KEY caps).',
    samples: eachStoredKey((u) => u.hooks),
  },
  {
    name: 'edge_infer_key_in_flight_requests',
    type: 'gauge',
    help: 'Requests of a key generating or waiting on the shard (what its concurrent limit counts).',
    samples: eachKey((k) => k.inFlight),
  },
  {
    name: 'edge_infer_key_window_requests',
    type: 'gauge',
    help: "Requests the shard admitted for a key in the last 60 s (what its rpm share counts; sum over shards for the key's total).",
    samples: eachKey((k) => k.windowRequests),
  },
  {
    name: 'edge_infer_key_window_tokens',
    type: 'gauge',
    help: "Tokens the shard charged a key in the last 60 s (what its tpm share counts; sum over shards for the key's total).",
    samples: eachKey((k) => k.windowTokens),
  },
];
