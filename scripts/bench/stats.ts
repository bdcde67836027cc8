// Medians and run-by-run ratios: this machine is shared and noisy, so every figure is the median of
// several runs, and every comparison is a ratio taken inside each run (side by side) before the median.

export interface Sampled {
  median: number;
  runs: number[];
}

export function median(xs: readonly number[]): number {
  if (xs.length === 0) return NaN;
  const s = [...xs].sort((a, b) => a - b);
  const mid = s.length >> 1;
  return s.length % 2 ? s[mid] : (s[mid - 1] + s[mid]) / 2;
}

export function sampled(runs: readonly number[]): Sampled {
  return { median: median(runs), runs: [...runs] };
}

/** Median over runs of a[i] / b[i]: both measured in run i, side by side. */
export function ratioByRun(a: readonly number[], b: readonly number[]): Sampled {
  return sampled(a.map((x, i) => x / b[i]));
}

/** Collects samples under string keys, one per run. */
export class Samples {
  private readonly map = new Map<string, number[]>();
  add(key: string, value: number): void {
    const list = this.map.get(key) ?? [];
    list.push(value);
    this.map.set(key, list);
  }
  get(key: string): number[] {
    return this.map.get(key) ?? [];
  }
  has(key: string): boolean {
    return this.map.has(key);
  }
  /** The keys in the order each was first added. */
  keys(): string[] {
    return [...this.map.keys()];
  }
}

export const round = (x: number, digits = 2): number => (Number.isFinite(x) ? Number(x.toFixed(digits)) : x);

/** This process's CPU seconds so far (user and system): a shared VM's steal is not counted, as wall time would. */
export function cpuSeconds(): number {
  const u = process.cpuUsage();
  return (u.user + u.system) / 1e6;
}

/** The cosine of the angle between two vectors. */
export function cosine(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let ab = 0;
  let aa = 0;
  let bb = 0;
  for (let i = 0; i < a.length; i++) {
    ab += a[i] * b[i];
    aa += a[i] * a[i];
    bb += b[i] * b[i];
  }
  return ab / Math.sqrt(aa * bb);
}
