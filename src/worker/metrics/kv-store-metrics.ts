import { eachPersisted, eachStore } from './readers.js';
import type { MetricDefinition } from './metric.js';

/** KV blocks kept in the shard's durable storage: what is stored, written and restored. */
export const KV_STORE_METRICS: MetricDefinition[] = [
  {
    name: 'edge_infer_kv_store_bytes',
    type: 'gauge',
    help: "Bytes of full KV blocks kept in the shard's storage.",
    samples: eachStore((u) => u.bytes),
  },
  {
    name: 'edge_infer_kv_store_blocks',
    type: 'gauge',
    help: "Full KV blocks kept in the shard's storage.",
    samples: eachStore((u) => u.blocks),
  },
  {
    name: 'edge_infer_kv_store_budget_bytes',
    type: 'gauge',
    help: 'KV_STORE_MB in bytes: least recently used blocks are evicted past it.',
    samples: eachStore((u) => u.budgetBytes),
  },
  {
    name: 'edge_infer_kv_store_discarded_blocks_total',
    type: 'counter',
    help: 'Stored blocks dropped on restore because their bytes failed the checks (recomputed instead).',
    samples: eachStore((u) => u.discarded),
  },
  {
    name: 'edge_infer_kv_restored_blocks_total',
    type: 'counter',
    help: 'KV blocks restored from storage instead of prefilled.',
    samples: eachPersisted((k) => k.restored.blocks),
  },
  {
    name: 'edge_infer_kv_restored_tokens_total',
    type: 'counter',
    help: 'Prompt tokens whose KV was restored from storage instead of prefilled.',
    samples: eachPersisted((k) => k.restored.tokens),
  },
  {
    name: 'edge_infer_kv_restore_seconds_total',
    type: 'counter',
    help: 'Time spent reading blocks from storage into the pool.',
    samples: eachPersisted((k) => k.restored.ms / 1000),
  },
  {
    name: 'edge_infer_kv_stored_blocks_total',
    type: 'counter',
    help: 'KV blocks written to storage.',
    samples: eachPersisted((k) => k.storedBlocks),
  },
  {
    name: 'edge_infer_kv_stored_bytes_total',
    type: 'counter',
    help: 'Bytes of KV blocks written to storage.',
    samples: eachPersisted((k) => k.storedBytes),
  },
  {
    name: 'edge_infer_kv_store_write_seconds_total',
    type: 'counter',
    help: 'Time spent writing blocks to storage (after generations, off the token path).',
    samples: eachPersisted((k) => k.writeMs / 1000),
  },
  {
    name: 'edge_infer_kv_store_pending_chains',
    type: 'gauge',
    help: 'Finished sequences whose blocks are queued for storage or being written.',
    samples: eachPersisted((k) => k.pendingChains),
  },
  {
    name: 'edge_infer_kv_store_failed_chains_total',
    type: 'counter',
    help: 'Sequences whose blocks storage refused to take (they are recomputed if needed).',
    samples: eachPersisted((k) => k.failedChains),
  },
  {
    name: 'edge_infer_kv_restore_failures_total',
    type: 'counter',
    help: 'Stored blocks that could not be restored (a storage error, or a size this pool cannot take); the rest was prefilled.',
    samples: eachPersisted((k) => k.restored.failed + k.restored.rejected),
  },
];
