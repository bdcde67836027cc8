// The Worker configs of a model split over pipeline stages (docs/deploy.md, "Pipeline stages"), generated
// from wrangler.toml so that nothing is written twice: one script per stage (a class shared by every stage
// would put them all in one isolate), each a copy of the head's config with its own name, entry and object
// class, and the head's config with a binding to each stage's objects. Written beside wrangler.toml, where
// the relative paths in it (the entry, ./models) still hold.
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';

/** Vars a stage reads: where the model is and what it may use. The rest are the head's. */
export const STAGE_VARS = ['MODEL', 'MODEL_NAME', 'MODEL_DTYPE', 'MODEL_URL', 'MEMORY_BUDGET_MB', 'BACKEND'] as const;

/**
 * Names of a pipeline's configs and stage scripts. `tag` sets apart a pipeline run beside others on one machine
 * (tests, benches: the dev registry finds a stage by its script name); none for `npm start` and deploys.
 */
export const stageScriptName = (base: string, i: number, tag = ''): string => `${base}${tag && `-${tag}`}-stage-${i}`;
export const headConfigFile = 'wrangler.pipeline-head.toml';
export const stageConfigFile = (i: number): string => `wrangler.pipeline-stage-${i}.toml`;
export const taggedHeadConfigFile = (tag: string): string =>
  tag ? `wrangler.pipeline-${tag}-head.toml` : headConfigFile;
export const taggedStageConfigFile = (i: number, tag: string): string =>
  tag ? `wrangler.pipeline-${tag}-stage-${i}.toml` : stageConfigFile(i);

/** `text` with `pattern` replaced once; the config changed shape when it is not there. */
function replaceOnce(text: string, pattern: RegExp, by: string, what: string): string {
  if (!pattern.test(text)) throw new Error(`wrangler.toml: ${what} not found (stage-configs.ts reads it)`);
  return text.replace(pattern, by);
}

/** The script's name in a config (its top-level `name`). */
export function scriptName(toml: string): string {
  const m = /^name = "([^"]+)"/m.exec(toml);
  if (!m) throw new Error('wrangler.toml: no top-level name');
  return m[1];
}

/** Sets each var in the [vars] table (the file's last table): an existing line is replaced, a new one appended. */
export function withVars(toml: string, vars: Readonly<Record<string, string>>): string {
  const at = toml.indexOf('\n[vars]');
  if (at < 0 || /\n\[/.test(toml.slice(at + 7))) throw new Error('wrangler.toml: [vars] must be the last table');
  let out = toml.trimEnd();
  for (const [name, value] of Object.entries(vars)) {
    const line = `${name} = ${JSON.stringify(value)}`;
    const existing = new RegExp(`^${name} = "[^"]*"`, 'm');
    out = existing.test(out.slice(at)) ? out.slice(0, at) + out.slice(at).replace(existing, line) : `${out}\n${line}`;
  }
  return `${out}\n`;
}

/** Stage `i`'s config: the head's, renamed, with the stage entry and its StageObject class, and `vars` set. */
export function stageConfig(toml: string, i: number, vars: Readonly<Record<string, string>>, tag = ''): string {
  let out = replaceOnce(toml, /^name = "[^"]+"/m, `name = "${stageScriptName(scriptName(toml), i, tag)}"`, 'name');
  out = replaceOnce(out, /^main = "[^"]+"/m, 'main = "src/stage-worker/index.ts"', 'main');
  out = replaceOnce(
    out,
    /name = "INFERENCE"\nclass_name = "InferenceObject"/,
    'name = "STAGE"\nclass_name = "StageObject"',
    'the INFERENCE binding',
  );
  out = replaceOnce(
    out,
    /new_sqlite_classes = \["InferenceObject"\]/,
    'new_sqlite_classes = ["StageObject"]',
    'the migration',
  );
  // A stage has no public route of its own.
  out = out.replace(/^(compatibility_flags = .*)$/m, '$1\nworkers_dev = false');
  return withVars(out, vars);
}

/**
 * The head's config: wrangler.toml with PIPELINE_STAGES, a binding to each stage Worker's objects, and
 * PIPELINE_HEAD (its name and the run's tag), for which its stage objects are named (src/objects/stage-links.ts).
 */
export function headConfig(toml: string, stages: number, tag = ''): string {
  const base = scriptName(toml);
  const bindings = Array.from(
    { length: stages },
    (_, i) =>
      `[[durable_objects.bindings]]\nname = "STAGE_${i + 1}"\nclass_name = "StageObject"\nscript_name = "${stageScriptName(base, i + 1, tag)}"\n`,
  ).join('\n');
  // Arrays of tables may be extended after [vars]; the vars stay the file's last table for withVars.
  const at = toml.indexOf('\n[vars]');
  return withVars(`${toml.slice(0, at)}\n${bindings}${toml.slice(at)}`, {
    PIPELINE_STAGES: String(stages),
    PIPELINE_HEAD: `${base}${tag && `-${tag}`}`,
  });
}

/** Writes the head's and every stage's config beside wrangler.toml; returns their file names, head first. */
export function writePipelineConfigs(
  root: string,
  toml: string,
  stages: number,
  vars: Readonly<Record<string, string>>,
  tag = '',
): string[] {
  const stageVars = Object.fromEntries(
    Object.entries(vars).filter(([name]) => (STAGE_VARS as readonly string[]).includes(name)),
  );
  writeFileSync(join(root, taggedHeadConfigFile(tag)), headConfig(toml, stages, tag));
  const files = [taggedHeadConfigFile(tag)];
  for (let i = 1; i <= stages; i++) {
    writeFileSync(join(root, taggedStageConfigFile(i, tag)), stageConfig(toml, i, stageVars, tag));
    files.push(taggedStageConfigFile(i, tag));
  }
  return files;
}

/** The vars a `wrangler dev` command line sets (`--var NAME:VALUE`, `--var=NAME:VALUE`), last one winning. */
export function varsOfArgs(args: readonly string[]): Record<string, string> {
  const vars: Record<string, string> = {};
  for (let i = 0; i < args.length; i++) {
    const spec = args[i] === '--var' ? args[++i] : args[i].startsWith('--var=') ? args[i].slice(6) : undefined;
    const at = spec?.indexOf(':') ?? -1;
    if (spec && at > 0) vars[spec.slice(0, at)] = spec.slice(at + 1);
  }
  return vars;
}

/**
 * For a `wrangler dev` command line that sets PIPELINE_STAGES: the configs written and the `-c` flags that run
 * the head and every stage Worker in the one process (the first config is the one served); else nothing.
 */
export function pipelineConfigArgs(root: string, toml: string, args: readonly string[], tag = ''): string[] {
  const vars = varsOfArgs(args);
  const stages = Number(vars.PIPELINE_STAGES ?? 0);
  if (!Number.isSafeInteger(stages) || stages < 1) return [];
  return writePipelineConfigs(root, toml, stages, vars, tag).flatMap((file) => ['-c', file]);
}
