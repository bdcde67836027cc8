import { createReadStream } from 'node:fs';
import { readFile, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { seekable, type ModelSource } from '../engine/model/model-files.js';

/** A model folder on local disk (Node only); `where` names it in messages (default: the path). */
export function directorySource(dir: string, where: string = dir, fix?: string): ModelSource {
  return {
    where,
    fix,
    async exists(path) {
      try {
        return (await stat(join(dir, path))).isFile();
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code === 'ENOENT') return false;
        throw err;
      }
    },
    async read(path) {
      try {
        return new Uint8Array(await readFile(join(dir, path)));
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null;
        throw err;
      }
    },
    async stream(path) {
      let size: number;
      try {
        size = (await stat(join(dir, path))).size;
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null;
        throw err;
      }
      const file = join(dir, path);
      const from = (start: number) => createReadStream(file, { highWaterMark: 1 << 20, start });
      return { chunks: seekable(from(0), from), size };
    },
  };
}
