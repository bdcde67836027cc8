// A model folder written where a running `npm start` does not see it, then moved into ./models whole.
// wrangler dev watches ./models (its static assets): a folder written there file by file reloads the server at
// each file, and a file over the 25 MiB asset cap that appears before models/.assetsignore names its folder
// stops it ("Asset too large"). So: write into .import-staging/ beside ./models, list the folder in .assetsignore
// first where it is too big, then rename it in (one event; an old folder of that name is renamed away first).
import { cpSync, existsSync, mkdirSync, renameSync, rmSync } from 'node:fs';
import { basename, dirname, join, resolve } from 'node:path';
import { hasLargeFile, ignoreModelFolder } from './assets-ignore.js';

/** Where staged folders are written: beside the models folder, on its filesystem, outside what wrangler watches. */
export const stagingRoot = (modelsDir: string): string => join(dirname(resolve(modelsDir)), '.import-staging');

/**
 * Runs `write` on a staging folder and moves the result to `out` when `out` is a folder of `modelsDir`; else
 * writes `out` directly. `large`: the folder holds a file over the asset cap (and is listed in .assetsignore).
 */
export async function writeModelStaged<T>(
  out: string,
  modelsDir: string,
  write: (dir: string) => Promise<T> | T,
): Promise<{ result: T; large: boolean }> {
  const target = resolve(out);
  if (dirname(target) !== resolve(modelsDir)) return { result: await write(target), large: false };
  const name = basename(target);
  const staging = join(stagingRoot(modelsDir), `${name}-${process.pid}`);
  const old = `${staging}.old`;
  rmSync(staging, { recursive: true, force: true });
  mkdirSync(staging, { recursive: true });
  try {
    const result = await write(staging);
    mkdirSync(modelsDir, { recursive: true });
    const large = hasLargeFile(staging);
    if (large) ignoreModelFolder(modelsDir, name);
    if (existsSync(target)) renameSync(target, old);
    try {
      renameSync(staging, target);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EXDEV') throw err;
      cpSync(staging, target, { recursive: true }); // ./models on another filesystem: copied, not moved
    }
    return { result, large };
  } finally {
    rmSync(staging, { recursive: true, force: true });
    rmSync(old, { recursive: true, force: true });
  }
}
