// Generates text from a model folder on disk, streaming it to stdout (or one JSON object with --json).
// npm run generate -- --model <dir> (--prompt TEXT | --prompt-ids 1,2,3 | --messages FILE.json) [options]
import { readFileSync } from 'node:fs';
import { basename, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { Engine } from '../src/engine/engine.js';
import { InvalidRequestError } from '../src/engine/errors.js';
import type { GenerationRequest } from '../src/engine/request.js';
import { directorySource } from '../src/sources/directory-source.js';
import { loadLoraAdapter, type LoraAdapter } from '../src/engine/adapters/lora-adapter.js';
import { folderWeights } from './lib/model-weights.js';
import { isNodeBackend, nodeRuntime, NODE_BACKENDS } from './lib/runtimes.js';
import { answerHelp } from './lib/help.js';

const USAGE = `Usage: npm run generate -- --model <dir> (--prompt TEXT | --prompt-ids 1,2,3 | --messages FILE.json)
  [--max-tokens N] [--temperature T] [--top-k K] [--top-p P] [--min-p P] [--seed S] [--stop STR]...
  [--frequency-penalty F] [--presence-penalty F] [--repetition-penalty R]
  [--speculative ngram|draft] [--num-speculative-tokens N] [--draft-model <dir>]
  [--beam-width K] [--length-penalty A] [--early-stopping true|false|never] [--n N]
  [--dtype fp32|fp16|int8|q4|gguf|...] [--backend auto|cpu|wasm|kernels|ort-wasm|webgpu] [--lora DIR] [--json]
  --lora runs a LoRA adapter (a PEFT folder: adapter_config.json + adapter_model.safetensors) on the base model,
  on our kernels (--backend auto picks them);
  --dtype defaults to the folder's only weights, else its GGUF, else fp32 (as the server's MODEL_DTYPE does);
  --backend auto runs quantised and GGUF weights on our kernels, float ones on onnxruntime-node (WebGPU
  instead where a hardware GPU adapter exists).`;

answerHelp(USAGE);
const { values: args } = parseArgs({
  options: {
    model: { type: 'string' },
    prompt: { type: 'string' },
    'prompt-ids': { type: 'string' },
    messages: { type: 'string' },
    'max-tokens': { type: 'string' },
    temperature: { type: 'string' },
    'top-k': { type: 'string' },
    'top-p': { type: 'string' },
    'min-p': { type: 'string' },
    'frequency-penalty': { type: 'string' },
    'presence-penalty': { type: 'string' },
    'repetition-penalty': { type: 'string' },
    seed: { type: 'string' },
    stop: { type: 'string', multiple: true },
    speculative: { type: 'string' },
    'num-speculative-tokens': { type: 'string', default: '4' },
    'draft-model': { type: 'string' },
    'beam-width': { type: 'string' },
    'length-penalty': { type: 'string' },
    'early-stopping': { type: 'string' },
    n: { type: 'string' },
    dtype: { type: 'string' },
    lora: { type: 'string' },
    backend: { type: 'string', default: 'auto' },
    json: { type: 'boolean', default: false },
    help: { type: 'boolean', default: false },
  },
});

if (args.help || !args.model) {
  console.error(USAGE);
  process.exit(args.help ? 0 : 2);
}

// Numbers are passed through as parsed, unchecked: the engine validates them and names the bad one.
const num = (v: string | undefined): number | undefined => (v === undefined ? undefined : Number(v));

const request: GenerationRequest = {
  max_tokens: num(args['max-tokens']),
  temperature: num(args.temperature),
  top_k: num(args['top-k']),
  top_p: num(args['top-p']),
  min_p: num(args['min-p']),
  frequency_penalty: num(args['frequency-penalty']),
  presence_penalty: num(args['presence-penalty']),
  repetition_penalty: num(args['repetition-penalty']),
  seed: num(args.seed),
  stop: args.stop,
  n: num(args.n),
  beam_width: num(args['beam-width']),
  length_penalty: num(args['length-penalty']),
  early_stopping:
    args['early-stopping'] === undefined
      ? undefined
      : args['early-stopping'] === 'never'
        ? 'never'
        : args['early-stopping'] === 'true',
  speculative:
    args.speculative === undefined
      ? undefined
      : { method: args.speculative as 'ngram' | 'draft', num_tokens: Number(args['num-speculative-tokens']) },
};
if (args.prompt !== undefined) request.prompt = args.prompt;
if (args['prompt-ids'] !== undefined) request.prompt_ids = args['prompt-ids'].split(',').map((s) => Number(s.trim()));
if (args.messages !== undefined) request.messages = JSON.parse(readFileSync(args.messages, 'utf8'));
for (const key of Object.keys(request) as (keyof GenerationRequest)[])
  if (request[key] === undefined) delete request[key];

/** The PEFT folder `dir` as an adapter of `engine`'s model (read as its adapters/<folder name>/ would be). */
async function loadAdapterFolder(engine: Engine, dir: string): Promise<LoraAdapter> {
  if (!engine.runner.rowAdapters) await engine.loadAdapter(basename(resolve(dir))); // refuses, naming the runner
  const name = basename(resolve(dir));
  const files = directorySource(resolve(dir, '..'));
  const prefix = 'adapters/';
  const source = { read: (path: string) => (path.startsWith(prefix) ? files.read(path.slice(prefix.length)) : null) };
  return loadLoraAdapter(source as never, name, engine.config);
}

try {
  if (!isNodeBackend(args.backend))
    throw new InvalidRequestError(
      'backend',
      `--backend must be one of ${NODE_BACKENDS.join(', ')}, got ${args.backend}`,
    );
  // The rule the server follows too: the folder's only weights, else its GGUF, else fp32 (default-weights.ts).
  const { dtype } = await folderWeights(args.model, args.dtype);
  // Adapters run on the kernels: auto picks them for an adapter whatever the dtype.
  const backend = args.lora !== undefined && args.backend === 'auto' ? 'kernels' : args.backend;
  const runtime = await nodeRuntime(backend, dtype);
  const draft = args['draft-model'] === undefined ? undefined : { source: directorySource(args['draft-model']) };
  const engine = await Engine.load(runtime, directorySource(args.model), { dtype, draft });
  const adapter = args.lora === undefined ? undefined : await loadAdapterFolder(engine, args.lora);
  for await (const event of engine.generate(request, { adapter })) {
    if (event.type === 'token') {
      if (!args.json) process.stdout.write(event.text);
      continue;
    }
    if (args.json) {
      const result = {
        prompt_ids: event.promptIds,
        token_ids: event.tokenIds,
        text: event.text,
        finish_reason: event.finishReason,
        ...(event.beam ? { beam_score: event.beam.score, cumulative_logprob: event.beam.cumulativeLogprob } : {}),
        ...(event.speculation ? { speculation: event.speculation } : {}),
        ttft_ms: Number(event.metrics.ttftMs.toFixed(3)),
        decode_tokens_per_s: Number(event.metrics.decodeTokensPerS.toFixed(2)),
      };
      process.stdout.write(`${JSON.stringify(result)}\n`);
    } else {
      // Beam search streams nothing: each candidate's text arrives with its done event.
      process.stdout.write(event.beam ? `${event.text}\n` : '\n');
      const m = event.metrics;
      const beam = event.beam ? `beam score ${event.beam.score.toFixed(4)}, ` : '';
      const spec = event.speculation
        ? `, ${event.speculation.acceptedTokens}/${event.speculation.proposedTokens} proposals accepted`
        : '';
      console.error(
        `[${event.finishReason}] ${beam}prompt ${m.promptTokens} tokens, completion ${m.completionTokens} tokens, ` +
          `ttft ${m.ttftMs.toFixed(1)} ms, decode ${m.decodeTokensPerS.toFixed(1)} tok/s (${runtime.name})${spec}`,
      );
    }
  }
} catch (err) {
  if (err instanceof InvalidRequestError) {
    if (err.param === 'model' && args.lora !== undefined) {
      console.error(`error: --lora: ${err.message}`);
      process.exit(2);
    }
    console.error(`error: ${err.param}: ${err.message}`);
    process.exit(2);
  }
  throw err;
}
