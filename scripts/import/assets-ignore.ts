// ./models is the static-assets directory, and wrangler refuses to start when an asset is over 25 MiB.
// Real models live there too (model:pull / model:import write them there) but are served from R2, so
// every model folder holding a file over the cap is listed in models/.assetsignore, which wrangler reads.
import { appendFileSync, existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';

export const ASSET_LIMIT_BYTES = 25 * 2 ** 20;

function hasLargeFile(dir: string): boolean {
  return readdirSync(dir).some((name) => {
    const path = join(dir, name);
    const s = statSync(path);
    return s.isDirectory() ? hasLargeFile(path) : s.size > ASSET_LIMIT_BYTES;
  });
}

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
