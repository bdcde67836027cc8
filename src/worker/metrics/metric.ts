import type { EngineStats } from '../../engine/engine-stats.js';
import type { HistogramSnapshot, ShardStats } from '../../objects/service-metrics.js';

export type Labels = Record<string, string>;

/** One shard's stats with the labels every one of its samples carries (shard index, model). */
export interface LabelledShard {
  labels: Labels;
  stats: ShardStats;
}

/** A shard whose engine is loaded: engine gauges and counters exist only for these. */
export interface LoadedShard extends LabelledShard {
  engine: EngineStats;
}

/** What a metric's samples are read from: every shard's stats, and the backend the service runs on. */
export interface Scrape {
  shards: readonly LabelledShard[];
  loaded: readonly LoadedShard[];
  backend: string;
}

export type Sample = [Labels, number];
export type HistogramSample = [Labels, HistogramSnapshot];

/** One metric family: its name, type and help as Prometheus shows them, and how its samples are read. */
export type MetricDefinition =
  | { name: string; type: 'counter' | 'gauge'; help: string; samples: (scrape: Scrape) => Sample[] }
  | { name: string; type: 'histogram'; help: string; samples: (scrape: Scrape) => HistogramSample[] };
