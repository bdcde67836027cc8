import type { EngineStats } from '../../engine/engine-stats.js';
import type { KeyStats, ShardStats } from '../../objects/service-metrics.js';
import type { StoredUse } from '../../objects/tenancy/storage-quota.js';
import type { Labels, Sample, Scrape } from './metric.js';

/**
 * How metric definitions read their samples from a scrape: one reader per part of the stats, each giving one
 * sample per shard (or per shard and stage, key...) that has that part.
 */
type Read = (scrape: Scrape) => Sample[];

type Host = NonNullable<EngineStats['host']>;
type Stage = NonNullable<EngineStats['stages']>[number];
type PersistedKv = NonNullable<EngineStats['kvStore']>;

/** Every shard, loaded or not. */
export const eachShard =
  (f: (s: ShardStats) => number): Read =>
  ({ shards }) =>
    shards.map(({ labels, stats }) => [labels, f(stats)]);

/** Every shard whose engine is loaded. */
export const eachEngine =
  (f: (e: EngineStats) => number): Read =>
  ({ loaded }) =>
    loaded.map(({ labels, engine }) => [labels, f(engine)]);

/** Shards that keep KV blocks in their storage (read from SQLite, so known before the engine loads). */
export const eachStore =
  (f: (u: NonNullable<ShardStats['kvStore']>) => number): Read =>
  ({ shards }) =>
    shards.flatMap(({ labels, stats }): Sample[] => (stats.kvStore ? [[labels, f(stats.kvStore)]] : []));

/** Shards that know their isolate's use. */
export const eachIsolate =
  (f: (u: NonNullable<ShardStats['isolate']>) => number): Read =>
  ({ shards }) =>
    shards.flatMap(({ labels, stats }): Sample[] => (stats.isolate ? [[labels, f(stats.isolate)]] : []));

/** Each pipeline stage of each loaded shard, labelled by stage (from 1) and its layers [from, to). */
export const eachStage =
  (f: (s: Stage) => number): Read =>
  ({ loaded }) =>
    loaded.flatMap(({ labels, engine }) =>
      (engine.stages ?? []).map(
        (stage, i): Sample => [
          { ...labels, stage: String(i + 1), layers: `${stage.layers.from}-${stage.layers.to}` },
          f(stage),
        ],
      ),
    );

/** Loaded shards whose passes a GPU host runs; `more` adds labels read from the host. */
export const eachGpuHost =
  (f: (h: Host) => number, more: (h: Host) => Labels = () => ({})): Read =>
  ({ loaded }) =>
    loaded.flatMap(({ labels, engine }): Sample[] =>
      engine.host ? [[{ ...labels, ...more(engine.host) }, f(engine.host)]] : [],
    );

/** Loaded shards whose engine writes KV blocks to a durable store and restores them. */
export const eachPersisted =
  (f: (k: PersistedKv) => number): Read =>
  ({ loaded }) =>
    loaded.flatMap(({ labels, engine }): Sample[] => (engine.kvStore ? [[labels, f(engine.kvStore)]] : []));

/** Per key name (never a key): one sample per shard and key the shard has seen, where `f` has a value. */
export const eachKey =
  (f: (k: KeyStats) => number | undefined): Read =>
  ({ shards }) =>
    shards.flatMap(({ labels, stats }) =>
      Object.entries(stats.keys ?? {}).flatMap(([key, k]): Sample[] => {
        const v = f(k);
        return v === undefined ? [] : [[{ ...labels, key }, v]];
      }),
    );

/** What each key keeps in a shard's storage (sessions, hooks): one sample per shard and key name. */
export const eachStoredKey =
  (f: (u: StoredUse) => number): Read =>
  ({ shards }) =>
    shards.flatMap(({ labels, stats }) =>
      Object.entries(stats.stored ?? {}).map(([key, u]): Sample => [{ ...labels, key }, f(u)]),
    );
