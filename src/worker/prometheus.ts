import type { HistogramSnapshot } from '../objects/service-metrics.js';

type Labels = Record<string, string>;

const escapeLabelValue = (v: string): string => v.replace(/\\/g, '\\\\').replace(/\n/g, '\\n').replace(/"/g, '\\"');
const labelText = (labels: Labels): string => {
  const parts = Object.entries(labels).map(([k, v]) => `${k}="${escapeLabelValue(v)}"`);
  return parts.length ? `{${parts.join(',')}}` : '';
};
const num = (v: number): string => (Number.isFinite(v) ? String(v) : v > 0 ? '+Inf' : v < 0 ? '-Inf' : 'NaN');

/**
 * Prometheus text exposition (format 0.0.4): one HELP/TYPE header per family, its samples below it.
 * Families are declared with their samples all at once, so a family's lines always stay together.
 */
export class Exposition {
  private readonly lines: string[] = [];

  family(name: string, type: 'counter' | 'gauge', help: string, samples: Array<[Labels, number]>): this {
    this.lines.push(`# HELP ${name} ${help}`, `# TYPE ${name} ${type}`);
    for (const [labels, value] of samples) this.lines.push(`${name}${labelText(labels)} ${num(value)}`);
    return this;
  }

  histogram(name: string, help: string, samples: Array<[Labels, HistogramSnapshot]>): this {
    this.lines.push(`# HELP ${name} ${help}`, `# TYPE ${name} histogram`);
    for (const [labels, h] of samples) {
      for (const [i, le] of h.buckets.entries())
        this.lines.push(`${name}_bucket${labelText({ ...labels, le: num(le) })} ${h.counts[i]}`);
      this.lines.push(`${name}_bucket${labelText({ ...labels, le: '+Inf' })} ${h.count}`);
      this.lines.push(`${name}_sum${labelText(labels)} ${num(h.sum)}`, `${name}_count${labelText(labels)} ${h.count}`);
    }
    return this;
  }

  toString(): string {
    return `${this.lines.join('\n')}\n`;
  }
}
