// npm start's look at the configured model before wrangler dev starts (scripts/lib/model-check.ts), on the real
// generated folders in ./models and throwaway ones in a temp dir: what it reports for a servable model, and
// that a missing or unservable one is refused naming every place searched and the setting or command that fixes it.
import { spawnSync } from 'node:child_process';
import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, rmSync, truncateSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { checkModel, ModelCheckError, type CheckPlaces } from '../scripts/lib/model-check.js';
import { startStaticServer } from '../scripts/lib/static-server.js';
import { uploadModel } from '../scripts/model-upload.js';
import { startVars } from '../scripts/start-args.js';
import { llamaConfigJson, PRESETS } from '../scripts/model/presets.js';
import { writeGgufFolder } from './helpers/gguf-folder.js';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const MODELS = join(ROOT, 'models');
/** wrangler.toml's [vars]: what `npm start` serves with when nothing overrides them. */
const TOML_VARS = startVars(readFileSync(join(ROOT, 'wrangler.toml'), 'utf8'), []);
let tmp: string;
/** ./models as it is, and no local R2 bucket (an empty persist root). */
let real: CheckPlaces;

beforeAll(() => {
  tmp = mkdtempSync(join(tmpdir(), 'start-check-'));
  real = { modelsDir: MODELS, persistRoot: join(tmp, 'no-state'), root: ROOT };
});
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

const check = (vars: Record<string, string>, places = real) => checkModel({ ...TOML_VARS, ...vars }, places);
async function refusal(vars: Record<string, string>, places = real): Promise<string> {
  const err = await check(vars, places).then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err, 'the check refuses').toBeInstanceOf(Error);
  return (err as Error).message;
}

/** A models dir in the temp dir holding folder `name`: tiny's config and tokenizer and the given weights of tiny's. */
function folder(name: string, weights: string[], config: Record<string, unknown> = {}): CheckPlaces {
  const modelsDir = join(tmp, `models-${name}`);
  const dir = join(modelsDir, name);
  mkdirSync(join(dir, 'onnx'), { recursive: true });
  for (const f of ['config.json', 'generation_config.json', 'tokenizer.json', 'tokenizer_config.json', ...weights])
    copyFileSync(join(MODELS, 'tiny', f), join(dir, f));
  const raw = JSON.parse(readFileSync(join(dir, 'config.json'), 'utf8')) as Record<string, unknown>;
  writeFileSync(join(dir, 'config.json'), JSON.stringify({ ...raw, ...config }));
  return { ...real, modelsDir };
}

describe('npm start checks the model before wrangler dev', () => {
  it('reports the default model: where, format, dtype, runner, context, vocabulary, chat template, memory', async () => {
    const lines = await check({});
    const line = (key: string) => lines.find((l) => l.startsWith(key)) ?? '';
    expect(line('model')).toBe('model     wordnet-chat from ./models/wordnet-chat/');
    expect(line('format')).toMatch(
      /^format +ONNX written by edge-infer's graph builder .*: onnx\/model\.onnx, 5\.0 MiB$/,
    );
    expect(line('dtype')).toBe('dtype     fp32 (fp32 among several; MODEL_DTYPE=fp16 or int8 or q4 picks another)');
    expect(line('runner')).toMatch(/^runner +kernels \(BACKEND auto;/);
    expect(line('context')).toBe('context   512 tokens; vocabulary 4096');
    expect(line('chat')).toMatch(/^chat +tokenizer_config\.json's \(\d+ characters\)$/);
    // wrangler.toml's budget, SHARD_COUNT=2 and KV_CACHE_MB=16: both shards' 16 MiB pools fit.
    expect(line('memory')).toMatch(
      /^memory +\d+\.\d MiB of MEMORY_BUDGET_MB 128: weights 5\.0 MiB \+ scratch .* for each of 2 shard\(s\) KV pool 16\.0 MiB/,
    );
  });

  it('names a GGUF folder, the asked dtype, the runner BACKEND forces and a draft model', async () => {
    // Its own GGUF folder: ./models/tiny-gguf is written by the workerd project's setup, which may not have run.
    const ggufPlaces = { ...real, modelsDir: join(tmp, 'models-gguf') };
    await writeGgufFolder(join(ggufPlaces.modelsDir, 'tiny-gguf'));
    const gguf = await check({ MODEL: 'tiny-gguf' }, ggufPlaces);
    expect(gguf).toContain('format    GGUF (model.gguf), 0.8 MiB');
    expect(gguf).toContain('runner    kernels (BACKEND auto)');
    // One shard: onnxruntime-web's session (110 MiB + 2.5x the weights) is each shard's own, and two pass 128 MiB.
    const q4 = await check({
      MODEL: 'tiny',
      MODEL_DTYPE: 'q4',
      BACKEND: 'ort-wasm',
      SHARD_COUNT: '1',
      DRAFT_MODEL: 'tiny-draft',
    });
    expect(q4).toContain('dtype     q4 (MODEL_DTYPE asks for it)');
    expect(q4).toContain('runner    onnxruntime (BACKEND ort-wasm)');
    expect(q4.at(-1)).toBe(
      'draft     tiny-draft from ./models/tiny-draft/: fp32 (onnx/model.onnx), counted when it loads',
    );
    // A graph of another architecture is planned on onnxruntime: the kernels run Llama graphs.
    const qwen = await check(
      { MODEL: 'qwen', SHARD_COUNT: '1' },
      folder('qwen', ['onnx/model.onnx'], { model_type: 'qwen2' }),
    );
    expect(qwen.find((l) => l.startsWith('runner'))).toBe('runner    onnxruntime (BACKEND auto)');
  });

  it('finds a model in the local R2 bucket before ./models, as the server does', async () => {
    const persistRoot = join(tmp, 'state');
    await uploadModel(
      { folder: join(MODELS, 'tiny'), name: 'tiny', dtype: 'q4', remote: false, persistTo: persistRoot },
      () => {},
    );
    const lines = await check({ MODEL: 'tiny' }, { ...real, persistRoot });
    expect(lines[0]).toMatch(/^model +tiny from the local R2 bucket \(MODEL_BUCKET, in .*state\) under tiny\/$/);
    // The bucket holds q4 only, though ./models/tiny holds four variants.
    expect(lines).toContain('dtype     q4 (the folder holds only these weights)');
  }, 60_000);

  it('refuses a MODEL_URL whose weights HEAD answers 500 with its message, not a stack trace', async () => {
    const files = await startStaticServer(join(MODELS, 'tiny'));
    const base = files.url;
    // config.json answers; every HEAD (the weights' look) answers 500.
    const failing = ((input: string | URL | Request, init?: RequestInit) =>
      init?.method === 'HEAD'
        ? Promise.resolve(new Response('broken', { status: 500 }))
        : fetch(input, init)) as typeof fetch;
    try {
      const err = await check({ MODEL: 'tiny', MODEL_URL: base }, { ...real, fetch: failing }).then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(err).toBeInstanceOf(ModelCheckError);
      expect((err as Error).message).toMatch(/^MODEL=tiny cannot be served from MODEL_URL: .*HTTP 500/);
    } finally {
      await files.close();
    }
  });

  it('refuses a model that is nowhere, naming every place searched and the commands that put it there', async () => {
    const message = await refusal({ MODEL: 'no-such-model' });
    expect(message).toContain('MODEL=no-such-model: no model folder found');
    expect(message).toContain('MODEL_URL is not set');
    expect(message).toContain('the local R2 bucket (MODEL_BUCKET) holds nothing yet');
    expect(message).toContain('./models/no-such-model/ does not exist');
    // Which other folders ./models holds depends on the suites that ran before; the generated ones are always there.
    expect(message).toMatch(/\.\/models holds ([\w-]+, )*tiny, ([\w-]+, )*tiny-draft(, [\w-]+)*\./);
    for (const command of [
      'npm run model:import --',
      'npm run model:pull --',
      'npm run model:upload --',
      'npm run model:make --',
    ])
      expect(message).toContain(command);
    expect(await refusal({ DRAFT_MODEL: 'no-draft' })).toContain('DRAFT_MODEL=no-draft: no model folder found');
  });

  it('refuses weights the folder rule cannot choose, naming MODEL_DTYPE', async () => {
    const several = folder('q4-int8', ['onnx/model_q4.onnx', 'onnx/model_int8.onnx']);
    expect(await refusal({ MODEL: 'q4-int8' }, several)).toBe(
      `MODEL=q4-int8 cannot be served: several weights in ${join(several.modelsDir, 'q4-int8')}/ and no fp32 or GGUF among them: ` +
        'int8 (onnx/model_int8.onnx), q4 (onnx/model_q4.onnx); choose one with MODEL_DTYPE (MODEL_DTYPE=int8)',
    );
    expect(await refusal({ MODEL: 'tiny', MODEL_DTYPE: 'bnb4' })).toContain(
      'MODEL_DTYPE=bnb4 asks for onnx/model_bnb4.onnx, which is missing in ./models/tiny/',
    );
  });

  it('refuses a model past MEMORY_BUDGET_MB with the terms the load would count', async () => {
    const message = await refusal({ MEMORY_BUDGET_MB: '8' });
    expect(message).toMatch(
      /the model does not fit the memory budget: weights 5\.0 MiB \+ scratch .* > budget 8\.0 MiB/,
    );
    expect(message).toContain('Nothing smaller here fits: raise MEMORY_BUDGET_MB (now 8)');
    // Where the folder's other weights fit, they are named, with what they would take.
    expect(await refusal({ MEMORY_BUDGET_MB: '16' })).toMatch(
      /What fits MEMORY_BUDGET_MB 16: .*MODEL_DTYPE=q4 \(\d+\.\d MiB\)/,
    );
  });

  it('npm start exits non-zero before wrangler dev when the model cannot be served', () => {
    const run = spawnSync(process.execPath, ['--import', 'tsx', 'scripts/start.ts'], {
      cwd: ROOT,
      encoding: 'utf8',
      env: { ...process.env, MODEL: 'no-such-model', PIPELINE_STAGES: '' },
      timeout: 60_000,
    });
    expect(run.status, run.stderr).toBe(1);
    expect(run.stderr.split('\n')[0]).toMatch(/^edge-infer: serving no-such-model/);
    expect(run.stderr).toContain('./models/no-such-model/ does not exist');
    expect(run.stderr).not.toMatch(/Ready on/);
  }, 60_000);
});

/**
 * A models dir holding folder `name` shaped as `preset` (its config.json; tiny's tokenizer) with q4 weights of
 * `mb` MiB (a sparse file: the check reads no weights, only their size), under the 25 MiB asset cap unless asked.
 */
function shaped(name: string, preset: 'bench-135m' | 'bench-1b', mb: number): CheckPlaces {
  const places = folder(name, []);
  const dir = join(places.modelsDir, name);
  writeFileSync(join(dir, 'config.json'), JSON.stringify(llamaConfigJson(PRESETS[preset])));
  writeFileSync(join(dir, 'onnx', 'model_q4.onnx'), '');
  truncateSync(join(dir, 'onnx', 'model_q4.onnx'), Math.round(mb * 2 ** 20));
  return places;
}

describe('the start check sees what the Worker will see, and names the setting that fixes it (issue 47)', () => {
  it('a folder left out of the static assets is refused, naming model:upload (the Worker could not read it)', async () => {
    const places = shaped('too-big', 'bench-135m', 26);
    const message = await refusal({ MODEL: 'too-big' }, places);
    expect(message).toContain('is left out of the static assets');
    expect(message).toContain('npm run model:upload -- models/too-big');
    // Listed in .assetsignore (as npm start and model:import list such folders) is the same, whatever its sizes.
    const listed = shaped('listed', 'bench-135m', 1);
    writeFileSync(join(listed.modelsDir, '.assetsignore'), 'listed/\n');
    expect(await refusal({ MODEL: 'listed' }, listed)).toContain('npm run model:upload -- models/listed');
  });

  it('four shards past the 4-block floor: KV_DTYPE=int8 named, and with it the model starts', async () => {
    const places = shaped('four', 'bench-135m', 24);
    const vars = { MODEL: 'four', SHARD_COUNT: '4', MEMORY_BUDGET_MB: '56' };
    const message = await refusal(vars, places);
    expect(message).toMatch(/What fits MEMORY_BUDGET_MB 56: KV_DTYPE=int8 \(/);
    expect(message).toMatch(/SHARD_COUNT=3 \(/);
    const lines = await check({ ...vars, KV_DTYPE: 'int8' }, places);
    expect(lines.find((l) => l.startsWith('memory'))).toMatch(/of MEMORY_BUDGET_MB 56: .*for each of 4 shard\(s\)/);
  });

  it('fixed parts past the budget with small weights: not "the weights alone"; PIPELINE_STAGES=N computed', async () => {
    const places = shaped('wide', 'bench-1b', 20); // a 128k vocabulary: its scratch and isolate outweigh the weights
    const message = await refusal({ MODEL: 'wide', MEMORY_BUDGET_MB: '48' }, places);
    expect(message).not.toContain('weights alone');
    expect(message).toMatch(/weights 20\.0 MiB \+ scratch .* these parts already take .* before any KV cache/);
    expect(message).toMatch(/PIPELINE_STAGES=\d+ \(about .* of weights/);
  });

  it('says the KV pool the budget leaves when it is less than KV_CACHE_MB, and in tokens', async () => {
    const places = shaped('squeezed', 'bench-1b', 20);
    const kv = (await check({ MODEL: 'squeezed', MEMORY_BUDGET_MB: '64' }, places)).find((l) => l.startsWith('kv'));
    expect(kv).toMatch(/^kv +7\.0 MiB per shard at fp32, 112 tokens: not KV_CACHE_MB 16, .*KV_DTYPE=int8 holds 3\.76x/);
    const roomy = (await check({ MODEL: 'squeezed' }, places)).find((l) => l.startsWith('kv'));
    expect(roomy).toMatch(
      /^kv +\d+\.\d MiB per shard at fp32, \d+ tokens \(KV_CACHE_MB 16, in whole blocks of 16 tokens\)$/,
    );
  });
});
