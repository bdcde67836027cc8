import type { StoredUse } from '../../objects/tenancy/storage-quota.js';
import { Hono } from 'hono';
import type { EngineStats } from '../../engine/engine-stats.js';
import { serviceBackend, type Env } from '../../env.js';
import type { KeyStats, ShardStats } from '../../objects/service-metrics.js';
import { Exposition } from '../prometheus.js';
import { shardCount, shardStub } from '../routing.js';

/** GET /metrics: every shard's stats over RPC, in Prometheus text, labelled by shard. */
const metrics = new Hono<{ Bindings: Env }>();

metrics.get('/', async (c) => {
  const shards = await Promise.all(Array.from({ length: shardCount(c.env) }, (_, i) => shardStub(c.env, i).stats()));
  return c.text(render(shards, serviceBackend(c.env)), 200, {
    'content-type': 'text/plain; version=0.0.4; charset=utf-8',
  });
});

export function render(shards: ShardStats[], backend = 'wasm'): string {
  const labelled = shards.map((s, i) => ({ labels: { shard: String(i), model: s.model }, s }));
  const each = (f: (s: ShardStats) => number) =>
    labelled.map(({ labels, s }): [Record<string, string>, number] => [labels, f(s)]);
  // Engine gauges and counters exist only for shards whose engine is loaded.
  const loaded = labelled.filter(({ s }) => s.engine !== null);
  const engine = (f: (e: EngineStats) => number) =>
    loaded.map(({ labels, s }): [Record<string, string>, number] => [labels, f(s.engine!)]);
  const stored = labelled.filter(({ s }) => s.kvStore !== undefined);
  const store = (f: (u: NonNullable<ShardStats['kvStore']>) => number) =>
    stored.map(({ labels, s }): [Record<string, string>, number] => [labels, f(s.kvStore!)]);
  const isolate = (f: (u: NonNullable<ShardStats['isolate']>) => number) =>
    labelled
      .filter(({ s }) => s.isolate !== undefined)
      .map(({ labels, s }): [Record<string, string>, number] => [labels, f(s.isolate!)]);
  const stages = (f: (s: NonNullable<EngineStats['stages']>[number]) => number) =>
    loaded.flatMap(({ labels, s }) =>
      (s.engine!.stages ?? []).map((stage, i): [Record<string, string>, number] => [
        { ...labels, stage: String(i + 1), layers: `${stage.layers.from}-${stage.layers.to}` },
        f(stage),
      ]),
    );
  const gpuHost = (
    f: (h: NonNullable<EngineStats['host']>) => number,
    more: (h: NonNullable<EngineStats['host']>) => Record<string, string> = () => ({}),
  ) =>
    loaded
      .filter(({ s }) => s.engine!.host !== undefined)
      .map(({ labels, s }): [Record<string, string>, number] => [
        { ...labels, ...more(s.engine!.host!) },
        f(s.engine!.host!),
      ]);
  const withStore = loaded.filter(({ s }) => s.engine!.kvStore !== undefined);
  // Per key name (never a key): one sample per shard and key the shard has seen.
  const perKey = (f: (k: KeyStats) => number | undefined) =>
    labelled.flatMap(({ labels, s }) =>
      Object.entries(s.keys ?? {}).flatMap(([key, k]): [Record<string, string>, number][] => {
        const v = f(k);
        return v === undefined ? [] : [[{ ...labels, key }, v]];
      }),
    );
  // What each key keeps in a shard's storage (sessions, hooks): one sample per shard and key name.
  const storedBy = (f: (u: StoredUse) => number) =>
    labelled.flatMap(({ labels, s }) =>
      Object.entries(s.stored ?? {}).map(([key, u]): [Record<string, string>, number] => [{ ...labels, key }, f(u)]),
    );
  const persisted = (f: (k: NonNullable<EngineStats['kvStore']>) => number) =>
    withStore.map(({ labels, s }): [Record<string, string>, number] => [labels, f(s.engine!.kvStore!)]);

  const out = new Exposition()
    .family(
      'edge_infer_engine_loaded',
      'gauge',
      'Whether the shard has loaded its model (1) or not yet (0).',
      each((s) => (s.engine ? 1 : 0)),
    )
    .family(
      'edge_infer_backend_info',
      'gauge',
      'The backend the shard runs the model on (label backend: wasm or webgpu; runner: kernels or onnxruntime once loaded); always 1.',
      labelled.map(({ labels, s }): [Record<string, string>, number] => [
        { ...labels, backend, ...(s.engine ? { runner: s.engine.runner } : {}) },
        1,
      ]),
    )
    .family(
      'edge_infer_gpu_host_info',
      'gauge',
      "The GPU host that runs the shard's passes (GPU_HOST_URL), by runner, backend and adapter: 1 while a session is open and its KV trusted, else 0.",
      gpuHost(
        (h) => (h.connected ? 1 : 0),
        (h) => ({
          runner: h.runner,
          backend: h.backend ?? '',
          adapter: h.adapter ?? '',
        }),
      ),
    )
    .family(
      'edge_infer_gpu_host_passes_total',
      'counter',
      'Passes the GPU host answered for the shard.',
      gpuHost((h) => h.passes),
    )
    .family(
      'edge_infer_gpu_host_pass_seconds_total',
      'counter',
      "Round trips of those passes, seen from the object (the host's compute included).",
      gpuHost((h) => h.passMs / 1000),
    )
    .family(
      'edge_infer_gpu_host_compute_seconds_total',
      'counter',
      "The GPU host's own compute time in those passes (the rest of the round trip is the hop).",
      gpuHost((h) => h.computeMs / 1000),
    )
    .family(
      'edge_infer_gpu_host_reconnects_total',
      'counter',
      'Sessions the shard opened again on the GPU host (it restarted, or a call failed), its KV recomputed.',
      gpuHost((h) => h.reconnects),
    )
    .family(
      'edge_infer_gpu_host_failures_total',
      'counter',
      'Calls to the GPU host that failed (it could not be reached): the requests in those passes got a 503.',
      gpuHost((h) => h.failures),
    )
    .family(
      'edge_infer_wasm_memory_bytes',
      'gauge',
      "Bytes of the edge kernels' WebAssembly.Memory: weights, KV pool and scratch (kernel runner only).",
      loaded
        .filter(({ s }) => s.engine!.wasmMemoryBytes !== undefined)
        .map(({ labels, s }): [Record<string, string>, number] => [labels, s.engine!.wasmMemoryBytes!]),
    )
    .family(
      'edge_infer_isolate_counted_bytes',
      'gauge',
      "Bytes the isolate's memory budget counts for the shard's isolate: the weights once, every object's KV pool and state, the code and tokenizer.",
      isolate((u) => u.countedBytes),
    )
    .family(
      'edge_infer_isolate_objects',
      'gauge',
      "Objects in the shard's isolate sharing one copy of the weights (shards add throughput only in different isolates).",
      isolate((u) => u.objects),
    )
    .family(
      'edge_infer_kv_pool_bytes',
      'gauge',
      "Bytes of the shard's own KV block pool (sized so that SHARD_COUNT objects fit one isolate's budget).",
      engine((e) => e.kv.bytesTotal),
    )
    .family(
      'edge_infer_stage_isolate_bytes',
      'gauge',
      "Bytes a pipeline stage's isolate counts (its layers once, every stage object's KV pool), by stage and its layers [from, to).",
      stages((s) => s.isolateBytes ?? 0),
    )
    .family(
      'edge_infer_stage_kv_pool_bytes',
      'gauge',
      "Bytes of the shard's KV pool on a pipeline stage (every block, the stage's layers).",
      stages((s) => s.kvBytes),
    )
    .family(
      'edge_infer_stage_hops_total',
      'counter',
      'Passes the shard sent through a pipeline stage.',
      stages((s) => s.hops),
    )
    .family(
      'edge_infer_stage_hop_seconds_total',
      'counter',
      "Time of the shard's passes through a pipeline stage, round trip (with compute: the rest is the hop's own cost).",
      stages((s) => s.hopMs / 1000),
    )
    .family(
      'edge_infer_stage_compute_seconds_total',
      'counter',
      "Time a pipeline stage computed the shard's passes (its layers).",
      stages((s) => s.computeMs / 1000),
    )
    .family(
      'edge_infer_stage_restarts_total',
      'counter',
      'Times a pipeline stage was found restarted (its KV lost; the shard recomputed every sequence).',
      stages((s) => s.restarts),
    )
    .family(
      'edge_infer_model_load_seconds',
      'gauge',
      'How long the shard took to load its model (config, tokenizer, weights, KV pool), by source: url (MODEL_URL), r2 or assets.',
      labelled
        .filter(({ s }) => s.modelLoad !== undefined)
        .map(({ labels, s }): [Record<string, string>, number] => [
          { ...labels, source: s.modelLoad!.source },
          s.modelLoad!.seconds,
        ]),
    )
    .histogram(
      'edge_infer_time_to_first_token_seconds',
      'Time from arrival to the first generated token.',
      labelled.map(({ labels, s }) => [labels, s.ttftSeconds]),
    )
    .histogram(
      'edge_infer_inter_token_latency_seconds',
      'Time between consecutive generated tokens of one request.',
      labelled.map(({ labels, s }) => [labels, s.interTokenSeconds]),
    )
    .family(
      'edge_infer_prompt_tokens_total',
      'counter',
      'Prompt tokens of finished requests.',
      each((s) => s.promptTokens),
    )
    .family(
      'edge_infer_generation_tokens_total',
      'counter',
      'Tokens generated by finished requests.',
      each((s) => s.generationTokens),
    )
    .family(
      'edge_infer_requests_total',
      'counter',
      "Finished completions (each of a request's n choices) by finish reason.",
      labelled.flatMap(({ labels, s }) =>
        Object.entries(s.requests).map(([reason, v]): [Record<string, string>, number] => [
          { ...labels, finish_reason: reason },
          v,
        ]),
      ),
    )
    .family(
      'edge_infer_key_requests_total',
      'counter',
      'Finished requests per key name (a request with n choices counts once).',
      perKey((k) => k.requests),
    )
    .family(
      'edge_infer_key_prompt_tokens_total',
      'counter',
      'Prompt tokens of finished requests per key name.',
      perKey((k) => k.promptTokens),
    )
    .family(
      'edge_infer_key_completion_tokens_total',
      'counter',
      'Tokens generated per key name.',
      perKey((k) => k.completionTokens),
    )
    .family(
      'edge_infer_key_cached_tokens_total',
      'counter',
      'Prompt tokens served from the KV cache per key name.',
      perKey((k) => k.cachedTokens),
    )
    .family(
      'edge_infer_key_rate_limited_total',
      'counter',
      "Requests refused with 429 per key name and limit (requests, tokens, concurrent): this shard's share of RATE_LIMITS.",
      labelled.flatMap(({ labels, s }) =>
        Object.entries(s.keys ?? {}).flatMap(([key, k]) =>
          Object.entries(k.refused ?? {}).map(([limit, v]): [Record<string, string>, number] => [
            { ...labels, key, limit },
            v,
          ]),
        ),
      ),
    )
    .family(
      'edge_infer_key_stored_sessions',
      'gauge',
      'Sessions a key keeps on the shard (what MAX_SESSIONS_PER_KEY caps).',
      storedBy((u) => u.sessions),
    )
    .family(
      'edge_infer_key_stored_session_bytes',
      'gauge',
      "Bytes of a key's sessions on the shard: system prompts, transcripts, token logs and defaults.",
      storedBy((u) => u.sessionBytes),
    )
    .family(
      'edge_infer_key_stored_conversations',
      'gauge',
      'Conversations a key keeps on the shard (what MAX_CONVERSATIONS_PER_KEY caps).',
      storedBy((u) => u.conversations),
    )
    .family(
      'edge_infer_key_stored_conversation_bytes',
      'gauge',
      "Bytes of a key's conversations on the shard: items, metadata and token logs (what MAX_CONVERSATION_MB_PER_KEY caps).",
      storedBy((u) => u.conversationBytes),
    )
    .family(
      'edge_infer_key_hooks',
      'gauge',
      'Hooks a key keeps on the shard (what MAX_HOOKS_PER_KEY caps).',
      storedBy((u) => u.hooks),
    )
    .family(
      'edge_infer_key_in_flight_requests',
      'gauge',
      'Requests of a key generating or waiting on the shard (what its concurrent limit counts).',
      perKey((k) => k.inFlight),
    )
    .family(
      'edge_infer_key_window_requests',
      'gauge',
      "Requests the shard admitted for a key in the last 60 s (what its rpm share counts; sum over shards for the key's total).",
      perKey((k) => k.windowRequests),
    )
    .family(
      'edge_infer_key_window_tokens',
      'gauge',
      "Tokens the shard charged a key in the last 60 s (what its tpm share counts; sum over shards for the key's total).",
      perKey((k) => k.windowTokens),
    )
    .family(
      'edge_infer_prefix_cache_hit_tokens_total',
      'counter',
      'Prompt tokens served from the prefix cache instead of prefilled.',
      engine((e) => e.prefixHitTokens),
    )
    .family(
      'edge_infer_prefill_tokens_total',
      'counter',
      'Prompt tokens computed (including recompute after preemption).',
      engine((e) => e.prefillTokens),
    )
    .family(
      'edge_infer_preemptions_total',
      'counter',
      'Requests preempted (recomputed later) because the KV cache ran out.',
      engine((e) => e.preemptions),
    )
    .family(
      'edge_infer_kv_blocks_used',
      'gauge',
      'KV cache blocks held by sequences.',
      engine((e) => e.kv.used),
    )
    .family(
      'edge_infer_kv_blocks_cached_idle',
      'gauge',
      'Unreferenced KV blocks kept for prefix reuse.',
      engine((e) => e.kv.cachedIdle),
    )
    .family(
      'edge_infer_kv_blocks_free',
      'gauge',
      'KV cache blocks holding nothing.',
      engine((e) => e.kv.free),
    )
    .family(
      'edge_infer_kv_blocks_total',
      'gauge',
      'KV cache blocks in the pool.',
      engine((e) => e.kv.total),
    )
    .family(
      'edge_infer_kv_block_size_tokens',
      'gauge',
      'Tokens per KV block.',
      engine((e) => e.kv.blockSize),
    )
    .family(
      'edge_infer_kv_pool_tokens',
      'gauge',
      "Tokens the shard's KV pool holds in all (its blocks times their size: KV_CACHE_MB at KV_DTYPE).",
      engine((e) => e.kv.total * e.kv.blockSize),
    )
    .family(
      'edge_infer_kv_bytes_per_token',
      'gauge',
      'Bytes one token takes in the KV pool: every layer, keys and values, at KV_DTYPE (int8 rows keep a scale each).',
      engine((e) => e.kv.bytesPerToken),
    )
    .family(
      'edge_infer_queue_depth',
      'gauge',
      'Requests waiting to be admitted to the batch.',
      engine((e) => e.queueDepth),
    )
    .family(
      'edge_infer_running_requests',
      'gauge',
      'Requests admitted and not yet finished.',
      engine((e) => e.running),
    )
    .family(
      'edge_infer_pinned_sessions',
      'gauge',
      'Sessions whose KV cache is kept between turns.',
      engine((e) => e.pinnedSessions),
    )
    .family(
      'edge_infer_kv_store_bytes',
      'gauge',
      "Bytes of full KV blocks kept in the shard's storage.",
      store((u) => u.bytes),
    )
    .family(
      'edge_infer_kv_store_blocks',
      'gauge',
      "Full KV blocks kept in the shard's storage.",
      store((u) => u.blocks),
    )
    .family(
      'edge_infer_kv_store_budget_bytes',
      'gauge',
      'KV_STORE_MB in bytes: least recently used blocks are evicted past it.',
      store((u) => u.budgetBytes),
    )
    .family(
      'edge_infer_kv_store_discarded_blocks_total',
      'counter',
      'Stored blocks dropped on restore because their bytes failed the checks (recomputed instead).',
      store((u) => u.discarded),
    )
    .family(
      'edge_infer_kv_restored_blocks_total',
      'counter',
      'KV blocks restored from storage instead of prefilled.',
      persisted((k) => k.restored.blocks),
    )
    .family(
      'edge_infer_kv_restored_tokens_total',
      'counter',
      'Prompt tokens whose KV was restored from storage instead of prefilled.',
      persisted((k) => k.restored.tokens),
    )
    .family(
      'edge_infer_kv_restore_seconds_total',
      'counter',
      'Time spent reading blocks from storage into the pool.',
      persisted((k) => k.restored.ms / 1000),
    )
    .family(
      'edge_infer_kv_stored_blocks_total',
      'counter',
      'KV blocks written to storage.',
      persisted((k) => k.storedBlocks),
    )
    .family(
      'edge_infer_kv_stored_bytes_total',
      'counter',
      'Bytes of KV blocks written to storage.',
      persisted((k) => k.storedBytes),
    )
    .family(
      'edge_infer_kv_store_write_seconds_total',
      'counter',
      'Time spent writing blocks to storage (after generations, off the token path).',
      persisted((k) => k.writeMs / 1000),
    )
    .family(
      'edge_infer_kv_store_pending_chains',
      'gauge',
      'Finished sequences whose blocks are queued for storage or being written.',
      persisted((k) => k.pendingChains),
    )
    .family(
      'edge_infer_kv_store_failed_chains_total',
      'counter',
      'Sequences whose blocks storage refused to take (they are recomputed if needed).',
      persisted((k) => k.failedChains),
    )
    .family(
      'edge_infer_kv_restore_failures_total',
      'counter',
      'Stored blocks that could not be restored (a storage error, or a size this pool cannot take); the rest was prefilled.',
      persisted((k) => k.restored.failed + k.restored.rejected),
    )
    .family(
      'edge_infer_speculative_proposed_tokens_total',
      'counter',
      'Speculative tokens proposed and verified by the target.',
      engine((e) => e.proposedTokens),
    )
    .family(
      'edge_infer_speculative_accepted_tokens_total',
      'counter',
      'Speculative tokens the target accepted (acceptance rate = accepted / proposed).',
      engine((e) => e.acceptedTokens),
    )
    .histogram(
      'edge_infer_grammar_compile_seconds',
      'Time to compile a structured-output grammar (JSON schema, regex, choice, EBNF, forced tool call) for the tokenizer; cache hits excluded.',
      loaded.map(({ labels, s }) => [labels, s.engine!.grammar.compileSeconds]),
    )
    .family(
      'edge_infer_grammar_cache_hits_total',
      'counter',
      'Structured-output requests whose grammar was already compiled (cached per schema and tokenizer).',
      engine((e) => e.grammar.cacheHits),
    );
  return out.toString();
}

export default metrics;
