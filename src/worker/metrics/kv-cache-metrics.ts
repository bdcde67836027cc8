import { eachEngine } from './readers.js';
import type { MetricDefinition } from './metric.js';

/** The engine's KV block pool, prefix cache and scheduler queue. */
export const KV_CACHE_METRICS: MetricDefinition[] = [
  {
    name: 'edge_infer_prefix_cache_hit_tokens_total',
    type: 'counter',
    help: 'Prompt tokens served from the prefix cache instead of prefilled.',
    samples: eachEngine((e) => e.prefixHitTokens),
  },
  {
    name: 'edge_infer_prefill_tokens_total',
    type: 'counter',
    help: 'Prompt tokens computed (including recompute after preemption).',
    samples: eachEngine((e) => e.prefillTokens),
  },
  {
    name: 'edge_infer_preemptions_total',
    type: 'counter',
    help: 'Requests preempted (recomputed later) because the KV cache ran out.',
    samples: eachEngine((e) => e.preemptions),
  },
  {
    name: 'edge_infer_kv_blocks_used',
    type: 'gauge',
    help: 'KV cache blocks held by sequences.',
    samples: eachEngine((e) => e.kv.used),
  },
  {
    name: 'edge_infer_kv_blocks_cached_idle',
    type: 'gauge',
    help: 'Unreferenced KV blocks kept for prefix reuse.',
    samples: eachEngine((e) => e.kv.cachedIdle),
  },
  {
    name: 'edge_infer_kv_blocks_free',
    type: 'gauge',
    help: 'KV cache blocks holding nothing.',
    samples: eachEngine((e) => e.kv.free),
  },
  {
    name: 'edge_infer_kv_blocks_total',
    type: 'gauge',
    help: 'KV cache blocks in the pool.',
    samples: eachEngine((e) => e.kv.total),
  },
  {
    name: 'edge_infer_kv_block_size_tokens',
    type: 'gauge',
    help: 'Tokens per KV block.',
    samples: eachEngine((e) => e.kv.blockSize),
  },
  {
    name: 'edge_infer_kv_pool_tokens',
    type: 'gauge',
    help: "Tokens the shard's KV pool holds in all (its blocks times their size: KV_CACHE_MB at KV_DTYPE).",
    samples: eachEngine((e) => e.kv.total * e.kv.blockSize),
  },
  {
    name: 'edge_infer_kv_bytes_per_token',
    type: 'gauge',
    help: 'Bytes one token takes in the KV pool: every layer, keys and values, at KV_DTYPE (int8 rows keep a scale each).',
    samples: eachEngine((e) => e.kv.bytesPerToken),
  },
  {
    name: 'edge_infer_queue_depth',
    type: 'gauge',
    help: 'Requests waiting to be admitted to the batch.',
    samples: eachEngine((e) => e.queueDepth),
  },
  {
    name: 'edge_infer_running_requests',
    type: 'gauge',
    help: 'Requests admitted and not yet finished.',
    samples: eachEngine((e) => e.running),
  },
  {
    name: 'edge_infer_pinned_sessions',
    type: 'gauge',
    help: 'Sessions whose KV cache is kept between turns.',
    samples: eachEngine((e) => e.pinnedSessions),
  },
];
