import type { ShardStats } from '../../objects/service-metrics.js';
import { Exposition } from '../prometheus.js';
import type { LoadedShard, MetricDefinition, Scrape } from './metric.js';
import { METRICS } from './table.js';

/** The scrape the definitions read: each shard labelled by its index and model, and the loaded ones apart. */
export function scrapeOf(shards: readonly ShardStats[], backend: string): Scrape {
  const labelled = shards.map((stats, i) => ({ labels: { shard: String(i), model: stats.model }, stats }));
  const loaded = labelled.flatMap((s): LoadedShard[] => (s.stats.engine ? [{ ...s, engine: s.stats.engine }] : []));
  return { shards: labelled, loaded, backend };
}

/** Every shard's stats in Prometheus text, one family per definition of `table`, in its order. */
export function renderMetrics(
  shards: readonly ShardStats[],
  backend = 'wasm',
  table: readonly MetricDefinition[] = METRICS,
): string {
  const scrape = scrapeOf(shards, backend);
  const out = new Exposition();
  for (const m of table) {
    if (m.type === 'histogram') out.histogram(m.name, m.help, m.samples(scrape));
    else out.family(m.name, m.type, m.help, m.samples(scrape));
  }
  return out.toString();
}
