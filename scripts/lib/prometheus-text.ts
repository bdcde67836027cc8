/** The sum of metric `name` over every sample whose label set contains `labels` (e.g. `runner="kernels"`). */
export function sumMetric(text: string, name: string, labels = ''): number {
  let sum = 0;
  for (const line of text.split('\n')) {
    const match = line.match(/^([a-z_]+)(\{[^}]*\})? ([-0-9.e+]+|NaN)$/);
    if (match && match[1] === name && (match[2] ?? '').includes(labels)) sum += Number(match[3]);
  }
  return sum;
}

/** Every sample of metric `name`: its label text (`{shard="0",...}`) and value. */
export function samples(text: string, name: string): { labels: string; value: number }[] {
  const out: { labels: string; value: number }[] = [];
  for (const line of text.split('\n')) {
    const match = line.match(/^([a-z_]+)(\{[^}]*\})? ([-0-9.e+]+|NaN)$/);
    if (match && match[1] === name) out.push({ labels: match[2] ?? '', value: Number(match[3]) });
  }
  return out;
}
