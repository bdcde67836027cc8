// `npm start`'s look at the configured model before wrangler dev starts: where it is (MODEL_URL, the local R2
// bucket, ./models, searched in the server's order), its format and dtype, the runner it will get, its context,
// vocabulary and chat template, and its memory against MEMORY_BUDGET_MB, all from the files without loading
// the weights. What the server would refuse at its first request (no folder anywhere, weights the folder's
// rule cannot choose, a footprint past the budget) is refused here, with the places searched and the fix.
// The rules are the server's own: modelFolderFix, chooseWeights, plannedRunner and planMemory.
import { existsSync, readdirSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';
import { resolveEngineLimits } from '../../src/engine/defaults.js';
import { InvalidRequestError } from '../../src/engine/errors.js';
import { parseModelConfig } from '../../src/engine/model/config.js';
import { chooseWeights, type WeightsChoice } from '../../src/engine/model/default-weights.js';
import type { ModelSource } from '../../src/engine/model/model-files.js';
import { loadModelMeta } from '../../src/engine/model/model-files.js';
import { chatTemplateOf } from '../../src/engine/model-load.js';
import { mib } from '../../src/engine/runners/memory-budget.js';
import { planMemory, plannedRunner } from '../../src/engine/runners/runner-plan.js';
import { intVar, kvDtypeVar, pipelineStagesVar, requireWasmBackend, runnerChoice, type Env } from '../../src/env.js';
import { directorySource } from '../../src/sources/directory-source.js';
import { fetchSource } from '../../src/sources/fetch-source.js';
import { modelFolderFix } from '../../src/sources/model-source.js';
import { r2Source, type ObjectBucket } from '../../src/sources/r2-source.js';
import { TextTokenizer } from '../../src/tokenizer/tokenizer.js';
import { withLocalBucket } from '../model-upload.js';
import { assetsLeaveOut } from '../import/assets-ignore.js';
import { fittingSettings, kvLine, type PlanInput } from './memory-advice.js';

/** Where the check looks: the ./models folder, wrangler dev's local state (its R2 bucket) and, for MODEL_URL, fetch. */
export interface CheckPlaces {
  modelsDir: string;
  /** wrangler dev's persist root (`.wrangler/state`, or --persist-to): its R2 bucket is under v3/r2. */
  persistRoot: string;
  /** The project root, for the paths messages show. */
  root: string;
  fetch?: typeof fetch;
  /** How long MODEL_URL may take to answer before it is left to the first request. */
  urlTimeoutMs?: number;
}

/** A model folder that cannot be served as configured: the message names what was searched and the fix. */
export class ModelCheckError extends Error {}

interface Found {
  source: ModelSource;
  /** Where the folder was found, as a person would write it. */
  where: string;
  kind: 'url' | 'r2' | 'folder';
  /** A file's bytes without reading it (undefined where the place cannot say). */
  size(file: string): Promise<number | undefined>;
}

const MiB = 2 ** 20;

/** The server's places for `name`, in its order (src/sources/model-source.ts): what was found, or what each held. */
async function locate(
  name: string,
  places: CheckPlaces,
  bucket: ObjectBucket | undefined,
  url: string | undefined,
  fetcher: typeof fetch,
): Promise<Found | { searched: string[] }> {
  if (url) {
    const head = async (file: string) => {
      const res = await fetcher(new URL(file, url.endsWith('/') ? url : `${url}/`), { method: 'HEAD' });
      const length = Number(res.headers.get('content-length') ?? NaN);
      return Number.isFinite(length) ? length : undefined;
    };
    const source = fetchSource({ fetch: fetcher }, url, 'the folder MODEL_URL names');
    return { source, where: 'MODEL_URL (its config.json answered)', kind: 'url', size: head };
  }
  const searched = ['MODEL_URL is not set'];
  const persist = relative(places.root, places.persistRoot) || '.';
  if (bucket && (await bucket.head(`${name}/config.json`))) {
    const where = `the local R2 bucket (MODEL_BUCKET, in ${persist}) under ${name}/`;
    return {
      source: r2Source(bucket, name, where),
      where,
      kind: 'r2',
      size: async (file) => ((await bucket.head(`${name}/${file}`)) as { size?: number } | null)?.size,
    };
  }
  searched.push(
    bucket
      ? `the local R2 bucket (MODEL_BUCKET, in ${persist}) has no ${name}/config.json`
      : `the local R2 bucket (MODEL_BUCKET) holds nothing yet: there is no ${persist}/v3/r2`,
  );
  const dir = join(places.modelsDir, name);
  const rel = relative(places.root, dir);
  const shown = rel.startsWith('..') ? `${dir}/` : `./${rel}/`;
  if (existsSync(join(dir, 'config.json')) && assetsLeaveOut(places.modelsDir, name))
    throw new ModelCheckError(
      `MODEL=${name}: ${shown} is left out of the static assets (its files are over the 25 MiB asset cap; ` +
        `models/.assetsignore lists it), so the Worker cannot read it from there. Upload it into the local R2 bucket, ` +
        `where the Worker looks first: npm run model:upload -- models/${name}, then npm start again`,
    );
  if (existsSync(join(dir, 'config.json')))
    return {
      source: directorySource(dir, shown),
      where: shown,
      kind: 'folder',
      size: async (file) => (existsSync(join(dir, file)) ? statSync(join(dir, file)).size : undefined),
    };
  searched.push(`${shown} ${existsSync(dir) ? 'has no config.json' : 'does not exist'}`);
  return { searched };
}

/** Folders in ./models that hold a config.json: what MODEL could name instead. */
function modelFolders(modelsDir: string): string[] {
  if (!existsSync(modelsDir)) return [];
  return readdirSync(modelsDir)
    .filter((n) => !n.startsWith('.') && existsSync(join(modelsDir, n, 'config.json')))
    .sort();
}

function missing(name: string, variable: string, searched: string[], places: CheckPlaces): ModelCheckError {
  const others = modelFolders(places.modelsDir);
  return new ModelCheckError(
    `${variable}=${name}: no model folder found. Searched, in the server's order: ${searched.join('; ')}.` +
      `${others.length ? ` ./models holds ${others.join(', ')}.` : ''} To fix: ${modelFolderFix(name)}; ` +
      `or generate a small test model: npm run model:make -- --preset tiny --out models/${name}`,
  );
}

/** An ONNX file's producer_name (protobuf field 2 after ir_version), from its first bytes; undefined where unread. */
async function producerOf(source: ModelSource, file: string): Promise<string | undefined> {
  const stream = await source.stream?.(file);
  if (!stream) return undefined;
  let head: Uint8Array | undefined;
  for await (const chunk of stream.chunks) {
    head = chunk;
    break;
  }
  if (head?.[0] !== 0x08) return undefined;
  let at = 1;
  while (at < head.length && head[at] & 0x80) at++;
  at++;
  if (head[at] !== 0x12) return undefined;
  const length = head[at + 1];
  if (length === undefined || length & 0x80) return undefined;
  return new TextDecoder().decode(head.subarray(at + 2, at + 2 + length));
}

function formatOf(choice: WeightsChoice, producer: string | undefined): string {
  if (choice.dtype === 'gguf') return `GGUF (${choice.file})`;
  if (producer?.startsWith('edge-infer'))
    return `ONNX written by edge-infer's graph builder (npm run model:make, or model:import of safetensors, GGUF or a llama2.c checkpoint): ${choice.file}`;
  return `ONNX${producer ? ` exported by ${producer}` : ''}: ${choice.file}`;
}

const REASONS = {
  asked: 'MODEL_DTYPE asks for it',
  only: 'the folder holds only these weights',
  gguf: "the folder's GGUF file",
  fp32: 'fp32 among several',
} as const;

/** With what it was chosen from, and the variable that picks another. */
function dtypeLine(choice: WeightsChoice): string {
  const others = choice.present.filter((w) => w.dtype !== choice.dtype).map((w) => w.dtype);
  return `${choice.dtype} (${REASONS[choice.reason]}${others.length ? `; MODEL_DTYPE=${others.join(' or ')} picks another` : ''})`;
}

/** What the model must have besides its weights to serve chat: its template, or why chat is refused. */
function chatLine(vars: Record<string, string>, tokenizerConfig: Record<string, unknown>): string {
  if (vars.CHAT_TEMPLATE?.trim()) return 'CHAT_TEMPLATE (set)';
  const template = chatTemplateOf(tokenizerConfig.chat_template);
  return template
    ? `tokenizer_config.json's (${template.length} characters)`
    : 'none: a base model, completions only (chat requests are refused; CHAT_TEMPLATE sets one)';
}

const parts = (list: readonly { label: string; bytes: number }[]) =>
  list.map((p) => `${p.label} ${mib(p.bytes)}`).join(' + ');

/**
 * The check's report, one line per fact, for `vars` (wrangler.toml's [vars] with npm start's --vars over them);
 * throws ModelCheckError with what to do when the model cannot be served as configured.
 */
export async function checkModel(vars: Record<string, string>, places: CheckPlaces): Promise<string[]> {
  const r2 = join(places.persistRoot, 'v3', 'r2');
  // The local bucket is opened (a miniflare instance, as wrangler dev's own) only where wrangler dev keeps one.
  return existsSync(r2)
    ? withLocalBucket(places.persistRoot, (bucket) => check(vars, places, bucket as unknown as ObjectBucket))
    : check(vars, places, undefined);
}

async function check(
  vars: Record<string, string>,
  places: CheckPlaces,
  bucket: ObjectBucket | undefined,
): Promise<string[]> {
  const env = vars as unknown as Env;
  const name = vars.MODEL_NAME?.trim() || vars.MODEL?.trim() || '';
  const url = vars.MODEL_URL?.trim() || undefined;
  const timeout = places.urlTimeoutMs ?? 5000;
  const base = places.fetch ?? fetch;
  const fetcher = ((input: string | URL | Request, init?: RequestInit) =>
    base(input, { ...init, signal: AbortSignal.timeout(timeout) })) as typeof fetch;
  const refuse = (err: unknown): never => {
    if (err instanceof InvalidRequestError || err instanceof SyntaxError)
      throw new ModelCheckError(`MODEL=${name} cannot be served: ${err.message}`);
    // A MODEL_URL that answers with an error (a HEAD of the weights answering 500): the check's message, not a stack.
    if (url && err instanceof Error)
      throw new ModelCheckError(
        `MODEL=${name} cannot be served from MODEL_URL: ${err.message.split(url).join('MODEL_URL')}; mend the server or point MODEL_URL at one that serves the folder`,
      );
    throw err;
  };
  try {
    requireWasmBackend(env);
  } catch (err) {
    refuse(err);
  }
  const found = await locate(name, places, bucket, url, fetcher);
  if (!('source' in found)) throw missing(name, 'MODEL', found.searched, places);
  const { source } = found;
  const lines = [`model     ${name} from ${found.where}`];
  let meta: { rawConfig: Record<string, unknown>; tokenizerConfig?: Record<string, unknown>; vocab?: number };
  try {
    if (found.kind === 'url') {
      // Only config.json and the weights' HEADs: a hub tokenizer is megabytes, left to the first request.
      const bytes = await source.read('config.json');
      if (!bytes)
        throw new InvalidRequestError(
          'model',
          `MODEL_URL has no config.json (HTTP 404): point it at a folder holding config.json, the tokenizer files and the weights (a hub repo's .../resolve/<revision>/)`,
        );
      meta = { rawConfig: JSON.parse(new TextDecoder().decode(bytes)) as Record<string, unknown> };
    } else {
      const files = await loadModelMeta(source);
      const vocab = TextTokenizer.fromJson(files.tokenizerJson, files.tokenizerConfig).vocabSize;
      meta = { rawConfig: files.rawConfig, tokenizerConfig: files.tokenizerConfig, vocab };
    }
  } catch (err) {
    if (found.kind === 'url' && !(err instanceof InvalidRequestError) && !(err instanceof SyntaxError))
      return [
        `model     ${name} from MODEL_URL, which did not answer from here (${(err as Error).message}): it will be read at the first request`,
      ];
    return refuse(err);
  }
  try {
    const config = parseModelConfig(meta.rawConfig);
    const choice = await chooseWeights(source, meta.rawConfig, vars.MODEL_DTYPE?.trim() || undefined, 'MODEL_DTYPE');
    const weightBytes = await found.size(choice.file);
    const producer =
      found.kind === 'url' || choice.dtype === 'gguf' ? undefined : await producerOf(source, choice.file);
    const stages = pipelineStagesVar(env);
    const choiceOfRunner = runnerChoice(env);
    const runner = plannedRunner(
      { kernels: choiceOfRunner === 'onnxruntime' ? undefined : true, hasOnnxruntime: true, runner: choiceOfRunner },
      choice.dtype,
      meta.rawConfig,
      stages > 0,
    );
    lines.push(
      `format    ${formatOf(choice, producer)}${weightBytes === undefined ? '' : `, ${mib(weightBytes)}`}`,
      `dtype     ${dtypeLine(choice)}`,
      `runner    ${runner} (BACKEND ${vars.BACKEND?.trim() || 'auto'}${runner === 'kernels' && choice.dtype !== 'gguf' && !stages ? '; a graph the kernels do not cover falls back to onnxruntime when it loads' : ''})`,
      `context   ${config.maxPositionEmbeddings} tokens; vocabulary ${config.vocabSize}${meta.vocab !== undefined && meta.vocab !== config.vocabSize ? ` rows (the tokenizer's ${meta.vocab})` : ''}`,
      `chat      ${meta.tokenizerConfig ? chatLine(vars, meta.tokenizerConfig) : 'read with the tokenizer at the first request'}`,
    );
    const budgetMb = intVar(env, 'MEMORY_BUDGET_MB');
    if (stages > 0) lines.push(`memory    over ${stages} pipeline stages: each checks MEMORY_BUDGET_MB when it loads`);
    else if (weightBytes === undefined)
      lines.push('memory    the weights file did not say its size: checked as it loads');
    else {
      const engines = intVar(env, 'SHARD_COUNT');
      const input: PlanInput = {
        config,
        tokenizerVocab: meta.vocab ?? config.vocabSize,
        dtype: choice.dtype,
        weightBytes,
        runner,
        runtimeName: 'wasm',
        limits: resolveEngineLimits({
          kvCacheBytes: intVar(env, 'KV_CACHE_MB') * MiB,
          memoryBudgetBytes: budgetMb * MiB,
          maxBatchSize: intVar(env, 'MAX_BATCH'),
        }),
        kvDtype: kvDtypeVar(env),
        engines,
      };
      let plan: ReturnType<typeof planMemory>;
      try {
        plan = planMemory(input);
      } catch (err) {
        // What would fit instead, each tried with the server's own plan (memory-advice.ts).
        const weights = await Promise.all(
          choice.present
            .filter((w) => w.dtype !== choice.dtype)
            .map(async (w) => ({ dtype: w.dtype, bytes: await found.size(w.file) })),
        );
        const fits = fittingSettings(input, weights);
        throw new ModelCheckError(
          `MODEL=${name} cannot be served: ${(err as Error).message}. ${
            fits.length
              ? `What fits MEMORY_BUDGET_MB ${budgetMb}: ${fits.join('; or ')}`
              : `Nothing smaller here fits: raise MEMORY_BUDGET_MB (now ${budgetMb}), or make smaller weights (npm run model:import -- ... --dtype q4)`
          }`,
        );
      }
      lines.push(
        `memory    ${mib(plan.totalBytes)} of MEMORY_BUDGET_MB ${budgetMb}: ${parts(plan.shared)}, and for each of ${engines} shard(s) ${parts(plan.perShard)}`,
        kvLine(input, plan.kvCacheBytes),
      );
    }
    const draft = vars.DRAFT_MODEL?.trim();
    if (draft) {
      const at = await locate(draft, places, bucket, undefined, fetcher);
      if (!('source' in at)) throw missing(draft, 'DRAFT_MODEL', at.searched, places);
      const raw = JSON.parse(new TextDecoder().decode((await at.source.read('config.json')) ?? new Uint8Array()));
      const weights = await chooseWeights(at.source, raw, undefined, 'the draft folder');
      lines.push(`draft     ${draft} from ${at.where}: ${weights.dtype} (${weights.file}), counted when it loads`);
    }
    return lines;
  } catch (err) {
    return refuse(err);
  }
}
