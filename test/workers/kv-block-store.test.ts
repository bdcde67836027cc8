/// <reference types="@cloudflare/vitest-pool-workers/types" />
// SqlKvBlockStore inside workerd, on a real Durable Object's SQLite: blocks round-trip (parts past the
// 2 MB row limit included), a write cut in the middle leaves nothing half written, damaged or torn rows
// are refused (the engine then prefills), and every case every store must pass (test/helpers/kv-store-cases.ts).
import { runInDurableObject } from 'cloudflare:test';
import { env } from 'cloudflare:workers';
import { describe, expect, it } from 'vitest';
import { SqlKvBlockStore } from '../../src/objects/kv-block-store.js';
import { KV_STORE_CASES } from '../helpers/kv-store-cases.js';

let unique = 0;

/** A store over a fresh object's storage (its name is never used by the service's shards). */
function withStore<T>(
  budget: number,
  body: (store: SqlKvBlockStore, storage: DurableObjectStorage) => T | Promise<T>,
): Promise<T> {
  const ns = (env as unknown as Cloudflare.Env).INFERENCE;
  const stub = ns.get(ns.idFromName(`kv-store-test-${++unique}-${Date.now()}`));
  return runInDurableObject(stub, async (_instance, state) => {
    const store = new SqlKvBlockStore(state.storage.sql, (fn) => state.storage.transactionSync(fn), budget);
    store.open('identity', 16);
    return body(store, state.storage);
  });
}

const bytes = (n: number, seed: number): Uint8Array =>
  Uint8Array.from({ length: n }, (_, i) => (i * 31 + seed * 7) & 0xff);

describe('SqlKvBlockStore', () => {
  it('round-trips blocks, including ones split into parts', async () => {
    await withStore(16 * 2 ** 20, (store, storage) => {
      const small = bytes(8192, 1);
      const large = bytes(2.5 * 2 ** 20, 2); // three parts of at most 1 MiB
      store.write({ hash: 'a', parent: '', bytes: small });
      store.write({ hash: 'b', parent: 'a', bytes: large });
      expect(store.read('a')).toEqual(small);
      expect(store.read('b')).toEqual(large);
      expect(storage.sql.exec("SELECT count(*) AS n FROM kv_block_parts WHERE hash = 'b'").one().n).toBe(3);
      expect(store.usage()).toMatchObject({ blocks: 2, bytes: small.length + large.length });
      // A second store over the same storage (a restarted object) sees the same blocks and counts.
      const again = new SqlKvBlockStore(storage.sql, (fn) => storage.transactionSync(fn), 16 * 2 ** 20);
      expect(again.usage()).toMatchObject({ blocks: 2, bytes: small.length + large.length });
      expect(again.read('b')).toEqual(large);
    });
  });

  it('a write cut between its rows leaves nothing behind', async () => {
    await withStore(16 * 2 ** 20, (store, storage) => {
      let inserts = 0;
      // The storage as seen by a store that dies after its block row and first part are written.
      const dying = new Proxy(storage.sql, {
        get(target, key) {
          if (key !== 'exec') return Reflect.get(target, key);
          return (query: string, ...args: unknown[]) => {
            if (query.startsWith('INSERT INTO kv_block_parts') && ++inserts === 2) throw new Error('killed mid-write');
            return target.exec(query, ...(args as SqlStorageValue[]));
          };
        },
      });
      const cut = new SqlKvBlockStore(dying, (fn) => storage.transactionSync(fn), 16 * 2 ** 20);
      expect(() => cut.write({ hash: 'torn', parent: '', bytes: bytes(2 * 2 ** 20 + 10, 3) })).toThrow(
        'killed mid-write',
      );
      expect(store.has('torn')).toBe(false);
      expect(storage.sql.exec("SELECT count(*) AS n FROM kv_block_parts WHERE hash = 'torn'").one().n).toBe(0);
      expect(cut.usage()).toMatchObject({ blocks: 0, bytes: 0 });
    });
  });

  it('refuses damaged, torn and mis-sized rows, and deletes them', async () => {
    await withStore(16 * 2 ** 20, (store, storage) => {
      for (const hash of ['flipped', 'part-gone', 'resized', 'good'])
        store.write({ hash, parent: '', bytes: bytes(3 * 2 ** 20, hash.length) });
      const damaged = new Uint8Array(
        storage.sql
          .exec<{ bytes: ArrayBuffer }>("SELECT bytes FROM kv_block_parts WHERE hash = 'flipped' AND part = 1")
          .one().bytes,
      );
      damaged[1000] ^= 0x10;
      storage.sql.exec("UPDATE kv_block_parts SET bytes = ? WHERE hash = 'flipped' AND part = 1", damaged.buffer);
      storage.sql.exec("DELETE FROM kv_block_parts WHERE hash = 'part-gone' AND part = 2");
      storage.sql.exec("UPDATE kv_blocks SET size = size - 4 WHERE hash = 'resized'");
      for (const hash of ['flipped', 'part-gone', 'resized']) {
        expect(store.read(hash), hash).toBeUndefined();
        expect(store.has(hash), hash).toBe(false);
      }
      expect(store.read('good')).toEqual(bytes(3 * 2 ** 20, 4));
      expect(store.usage()).toMatchObject({ blocks: 1, discarded: 3 });
    });
  });

  for (const c of KV_STORE_CASES) it(c.name, () => withStore(c.budget, (store) => c.run(store)));
});
