import { DECODING_METRICS } from './decoding-metrics.js';
import { KEY_METRICS } from './key-metrics.js';
import { KV_CACHE_METRICS } from './kv-cache-metrics.js';
import { KV_STORE_METRICS } from './kv-store-metrics.js';
import type { MetricDefinition } from './metric.js';
import { PLACEMENT_METRICS } from './placement-metrics.js';
import { REQUEST_METRICS } from './request-metrics.js';

/** Every metric GET /metrics exposes, in the order it shows them (dashboards find them by name, not order). */
export const METRICS: readonly MetricDefinition[] = [
  ...PLACEMENT_METRICS,
  ...REQUEST_METRICS,
  ...KEY_METRICS,
  ...KV_CACHE_METRICS,
  ...KV_STORE_METRICS,
  ...DECODING_METRICS,
];
