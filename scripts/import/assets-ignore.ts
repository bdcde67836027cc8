// ./models is the static-assets directory, and wrangler refuses to start when an asset is over 25 MiB.
// Real models live there too (model:pull / model:import write them there) but are served from R2, so
// every model folder holding a file over the cap is listed in models/.assetsignore, which wrangler reads.
import { appendFileSync, existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';

export const ASSET_LIMIT_BYTES = 25 * 2 ** 20;

export function hasLargeFile(dir: string): boolean {
  return readdirSync(dir).some((name) => {
    const path = join(dir, name);
    const s = statSync(path);
    return s.isDirectory() ? hasLargeFile(path) : s.size > ASSET_LIMIT_BYTES;
  });
}

/** Whether static assets leave folder `name` of `modelsDir` out: .assetsignore lists it, or it holds a file over the cap. */
export function assetsLeaveOut(modelsDir: string, name: string): boolean {
  const dir = join(modelsDir, name);
  return listedFolders(join(modelsDir, '.assetsignore')).has(`${name}/`) || (existsSync(dir) && hasLargeFile(dir));
}

/** The folders <modelsDir>/.assetsignore lists (`name/` lines). */
function listedFolders(file: string): Set<string> {
  return new Set(
    existsSync(file)
      ? readFileSync(file, 'utf8')
          .split('\n')
          .map((l) => l.trim())
      : [],
  );
}

const HEADER = '# model folders over the 25 MiB asset cap: served from R2 (npm run model:upload)\n';

/** Lists `<name>/` in <modelsDir>/.assetsignore unless it is there (the folder need not exist yet); true if added. */
export function ignoreModelFolder(modelsDir: string, name: string): boolean {
  const file = join(modelsDir, '.assetsignore');
  const listed = listedFolders(file);
  if (listed.has(`${name}/`)) return false;
  appendFileSync(file, `${listed.size === 0 ? HEADER : ''}${name}/\n`);
  return true;
}

/** What a user is told of a folder left out of the assets: why, and the command that serves it. */
export const leftOutMessage = (name: string): string =>
  `models/${name} has files over the 25 MiB asset cap: left out of the assets (models/.assetsignore), so the Worker cannot read it from there; upload it to R2 with npm run model:upload -- models/${name}, then MODEL=${name} npm start`;

/** Adds `<folder>/` to <modelsDir>/.assetsignore for each model folder too big for assets; returns the folders added. */
export function ignoreLargeModelFolders(modelsDir: string): string[] {
  if (!existsSync(modelsDir)) return [];
  const file = join(modelsDir, '.assetsignore');
  const listed = new Set(
    existsSync(file)
      ? readFileSync(file, 'utf8')
          .split('\n')
          .map((l) => l.trim())
      : [],
  );
  const added: string[] = [];
  for (const name of readdirSync(modelsDir).sort()) {
    const dir = join(modelsDir, name);
    if (!statSync(dir).isDirectory() || listed.has(`${name}/`) || !hasLargeFile(dir)) continue;
    appendFileSync(
      file,
      `${listed.size === 0 && added.length === 0 ? '# model folders over the 25 MiB asset cap: served from R2 (npm run model:upload)\n' : ''}${name}/\n`,
    );
    added.push(name);
  }
  return added;
}
