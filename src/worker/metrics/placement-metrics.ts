import { eachEngine, eachGpuHost, eachIsolate, eachShard, eachStage } from './readers.js';
import type { MetricDefinition, Sample } from './metric.js';

/** Where and on what each shard runs: its model and backend, the GPU host, memory and isolates, pipeline stages, the model load. */
export const PLACEMENT_METRICS: MetricDefinition[] = [
  {
    name: 'edge_infer_engine_loaded',
    type: 'gauge',
    help: 'Whether the shard has loaded its model (1) or not yet (0).',
    samples: eachShard((s) => (s.engine ? 1 : 0)),
  },
  {
    name: 'edge_infer_backend_info',
    type: 'gauge',
    help: 'The backend the shard runs the model on (label backend: wasm or webgpu; runner: kernels or onnxruntime once loaded); always 1.',
    samples: ({ shards, backend }) =>
      shards.map(
        ({ labels, stats }): Sample => [
          { ...labels, backend, ...(stats.engine ? { runner: stats.engine.runner } : {}) },
          1,
        ],
      ),
  },
  {
    name: 'edge_infer_gpu_host_info',
    type: 'gauge',
    help: "The GPU host that runs the shard's passes (GPU_HOST_URL), by runner, backend and adapter: 1 while a session is open and its KV trusted, else 0.",
    samples: eachGpuHost(
      (h) => (h.connected ? 1 : 0),
      (h) => ({
        runner: h.runner,
        backend: h.backend ?? '',
        adapter: h.adapter ?? '',
      }),
    ),
  },
  {
    name: 'edge_infer_gpu_host_passes_total',
    type: 'counter',
    help: 'Passes the GPU host answered for the shard.',
    samples: eachGpuHost((h) => h.passes),
  },
  {
    name: 'edge_infer_gpu_host_pass_seconds_total',
    type: 'counter',
    help: "Round trips of those passes, seen from the object (the host's compute included).",
    samples: eachGpuHost((h) => h.passMs / 1000),
  },
  {
    name: 'edge_infer_gpu_host_compute_seconds_total',
    type: 'counter',
    help: "The GPU host's own compute time in those passes (the rest of the round trip is the hop).",
    samples: eachGpuHost((h) => h.computeMs / 1000),
  },
  {
    name: 'edge_infer_gpu_host_reconnects_total',
    type: 'counter',
    help: 'Sessions the shard opened again on the GPU host (it restarted, or a call failed), its KV recomputed.',
    samples: eachGpuHost((h) => h.reconnects),
  },
  {
    name: 'edge_infer_gpu_host_failures_total',
    type: 'counter',
    help: 'Calls to the GPU host that failed (it could not be reached): the requests in those passes got a 503.',
    samples: eachGpuHost((h) => h.failures),
  },
  {
    name: 'edge_infer_wasm_memory_bytes',
    type: 'gauge',
    help: "Bytes of the edge kernels' WebAssembly.Memory: weights, KV pool and scratch (kernel runner only).",
    samples: ({ loaded }) =>
      loaded.flatMap(({ labels, engine }): Sample[] =>
        engine.wasmMemoryBytes !== undefined ? [[labels, engine.wasmMemoryBytes]] : [],
      ),
  },
  {
    name: 'edge_infer_isolate_counted_bytes',
    type: 'gauge',
    help: "Bytes the isolate's memory budget counts for the shard's isolate: the weights once, every object's KV pool and state, the code and tokenizer.",
    samples: eachIsolate((u) => u.countedBytes),
  },
  {
    name: 'edge_infer_isolate_objects',
    type: 'gauge',
    help: "Objects in the shard's isolate sharing one copy of the weights (shards add throughput only in different isolates).",
    samples: eachIsolate((u) => u.objects),
  },
  {
    name: 'edge_infer_kv_pool_bytes',
    type: 'gauge',
    help: "Bytes of the shard's own KV block pool (sized so that SHARD_COUNT objects fit one isolate's budget).",
    samples: eachEngine((e) => e.kv.bytesTotal),
  },
  {
    name: 'edge_infer_stage_isolate_bytes',
    type: 'gauge',
    help: "Bytes a pipeline stage's isolate counts (its layers once, every stage object's KV pool), by stage and its layers [from, to).",
    samples: eachStage((s) => s.isolateBytes ?? 0),
  },
  {
    name: 'edge_infer_stage_kv_pool_bytes',
    type: 'gauge',
    help: "Bytes of the shard's KV pool on a pipeline stage (every block, the stage's layers).",
    samples: eachStage((s) => s.kvBytes),
  },
  {
    name: 'edge_infer_stage_hops_total',
    type: 'counter',
    help: 'Passes the shard sent through a pipeline stage.',
    samples: eachStage((s) => s.hops),
  },
  {
    name: 'edge_infer_stage_hop_seconds_total',
    type: 'counter',
    help: "Time of the shard's passes through a pipeline stage, round trip (with compute: the rest is the hop's own cost).",
    samples: eachStage((s) => s.hopMs / 1000),
  },
  {
    name: 'edge_infer_stage_compute_seconds_total',
    type: 'counter',
    help: "Time a pipeline stage computed the shard's passes (its layers).",
    samples: eachStage((s) => s.computeMs / 1000),
  },
  {
    name: 'edge_infer_stage_restarts_total',
    type: 'counter',
    help: 'Times a pipeline stage was found restarted (its KV lost; the shard recomputed every sequence).',
    samples: eachStage((s) => s.restarts),
  },
  {
    name: 'edge_infer_model_load_seconds',
    type: 'gauge',
    help: 'How long the shard took to load its model (config, tokenizer, weights, KV pool), by source: url (MODEL_URL), r2 or assets.',
    samples: ({ shards }) =>
      shards.flatMap(({ labels, stats }): Sample[] =>
        stats.modelLoad ? [[{ ...labels, source: stats.modelLoad.source }, stats.modelLoad.seconds]] : [],
      ),
  },
];
