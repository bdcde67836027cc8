// What `npm run deploy` uploads as static assets (scripts/lib/deploy-assets.ts), on the real ./models: the
// served model's config, tokenizer and chosen weights, the draft's when one is configured, nothing else; and a
// file past the static-asset limit refused with the R2 command to use instead.
import {
  copyFileSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  truncateSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ASSET_LIMIT_BYTES } from '../scripts/import/assets-ignore.js';
import { deployAssets, stageAssets, withAssetsDirectory } from '../scripts/lib/deploy-assets.js';
import { startVars } from '../scripts/start-args.js';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const MODELS = join(ROOT, 'models');
const TOML = readFileSync(join(ROOT, 'wrangler.toml'), 'utf8');
/** wrangler.toml's [vars]: what a deploy serves unless a --var overrides them. */
const VARS = startVars(TOML, []);
const META = ['config.json', 'generation_config.json', 'tokenizer.json', 'tokenizer_config.json'];
let tmp: string;

beforeAll(() => {
  tmp = mkdtempSync(join(tmpdir(), 'deploy-assets-'));
});
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

const paths = (plan: { files: { path: string }[] }) => plan.files.map((f) => f.path).sort();

function filesUnder(dir: string): string[] {
  return readdirSync(dir, { recursive: true, encoding: 'utf8' })
    .filter((p) => statSync(join(dir, p)).isFile())
    .map((p) => relative(dir, join(dir, p)))
    .sort();
}

describe('the deploy ships only what is served', () => {
  it('the default model: its config, tokenizer and the weights the folder rule chooses', async () => {
    const plan = await deployAssets(MODELS, VARS);
    expect(VARS.MODEL).toBe('wordnet-chat');
    // wordnet-chat holds fp32, fp16, int8 and q4: the rule serves fp32, so only fp32 ships.
    expect(paths(plan)).toEqual([...META.map((f) => `wordnet-chat/${f}`), 'wordnet-chat/onnx/model.onnx'].sort());
    expect(plan.totalBytes).toBe(plan.files.reduce((n, f) => n + statSync(join(MODELS, f.path)).size, 0));
    // Every other folder in ./models stays home.
    expect(readdirSync(MODELS).filter((n) => !n.startsWith('.')).length).toBeGreaterThan(1);

    const out = join(tmp, 'staged');
    stageAssets(MODELS, plan, out);
    expect(filesUnder(out)).toEqual(paths(plan));
    // The generated config uploads the staged directory, through the same binding.
    const config = withAssetsDirectory(TOML, '.deploy-assets');
    expect(config).toMatch(/^\[assets\]\ndirectory = "\.\/\.deploy-assets"\nbinding = "MODELS"$/m);
    expect(config.replace('"./.deploy-assets"', '"./models"')).toBe(TOML);
  });

  it('MODEL_DTYPE and DRAFT_MODEL: the asked weights and the draft folder; MODEL_URL: no model files', async () => {
    const plan = await deployAssets(MODELS, { ...VARS, MODEL: 'tiny', MODEL_DTYPE: 'q4', DRAFT_MODEL: 'tiny-draft' });
    expect(paths(plan)).toEqual(
      [
        ...META.map((f) => `tiny/${f}`),
        'tiny/onnx/model_q4.onnx',
        ...META.map((f) => `tiny-draft/${f}`),
        'tiny-draft/onnx/model.onnx',
      ].sort(),
    );
    const url = await deployAssets(MODELS, { ...VARS, MODEL_URL: 'https://example.invalid/m/' });
    expect(url.files).toEqual([]);
    expect(url.notes).toEqual(['MODEL=wordnet-chat is read from MODEL_URL: none of its files are assets']);
    await expect(deployAssets(MODELS, { ...VARS, MODEL_DTYPE: 'bnb4' })).rejects.toThrow(
      /MODEL_DTYPE=bnb4 asks for onnx\/model_bnb4\.onnx, which is missing in models\/wordnet-chat\//,
    );
  });

  it('refuses a file past the 25 MiB asset limit, naming the R2 upload to use instead', async () => {
    const models = join(tmp, 'models');
    mkdirSync(join(models, 'big', 'onnx'), { recursive: true });
    for (const f of META) copyFileSync(join(MODELS, 'tiny', f), join(models, 'big', f));
    writeFileSync(join(models, 'big', 'onnx', 'model.onnx'), '');
    truncateSync(join(models, 'big', 'onnx', 'model.onnx'), ASSET_LIMIT_BYTES + 1); // sparse: no 25 MiB written
    const vars = { ...VARS, MODEL: 'big' };
    await expect(deployAssets(models, vars)).rejects.toThrow(
      'MODEL=big: models/big/onnx/model.onnx is 25.0 MiB, over the 25 MiB a static asset may be. ' +
        'Put the model in R2 instead: npm run model:upload -- models/big --dtype fp32 --remote, ' +
        'then npm run deploy -- --model-in-r2',
    );
    // Exactly the limit is allowed.
    truncateSync(join(models, 'big', 'onnx', 'model.onnx'), ASSET_LIMIT_BYTES);
    expect(paths(await deployAssets(models, vars))).toContain('big/onnx/model.onnx');
    // Once it is in R2, the deploy ships none of its files.
    truncateSync(join(models, 'big', 'onnx', 'model.onnx'), ASSET_LIMIT_BYTES + 1);
    expect((await deployAssets(models, vars, true)).files).toEqual([]);
    await expect(deployAssets(models, { ...VARS, MODEL: 'nowhere' })).rejects.toThrow(
      /there is no models\/nowhere\/config\.json to deploy.*npm run model:upload -- <folder> --name nowhere --remote/,
    );
  });
});
