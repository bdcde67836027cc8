// summary.md from run.log (the bench's per-run lines, so a phase cut short by a timeout still shows what it
// measured) and adapter.json. Medians over runs; "vs wasm" is the median of run-by-run ratios, as in the bench.
// Usage: node summary.mjs <out dir> [phases file]
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

const [out, phasesFile] = process.argv.slice(2);
const lines = ['# gpu-kit results', ''];
const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
};
try {
  const a = JSON.parse(readFileSync(join(out, 'adapter.json'), 'utf8'));
  lines.push(`adapter: ${JSON.stringify(a.info ?? a)}`, '');
} catch {
  lines.push('adapter: none', '');
}
const phases = new Map();
let current;
for (const line of readFileSync(join(out, 'run.log'), 'utf8').split('\n')) {
  const p = /==== phase: bench (\S+)/.exec(line);
  if (p) {
    current = { name: p[1], args: '', samples: new Map() };
    phases.set(p[1], current);
    continue;
  }
  if (/==== phase: /.test(line)) current = undefined;
  if (!current) continue;
  const a = /webgpu-bench\.mjs --model (\S+) (.*) \(timeout/.exec(line);
  if (a) current.args = `${a[1]} ${a[2]}`;
  const r = /run (\d+)\/(\d+) batch (\d+) (.+): ([\d.]+) tok\/s$/.exec(line);
  if (r) {
    const key = `${r[3]}|${r[4]}`;
    if (!current.samples.has(key)) current.samples.set(key, []);
    current.samples.get(key)[Number(r[1]) - 1] = Number(r[5]);
  }
}
for (const ph of phases.values()) {
  lines.push(`## ${ph.name}`, '', `\`${ph.args}\``, '');
  if (ph.samples.size === 0) {
    lines.push('no measurements', '');
    continue;
  }
  lines.push('| path | batch | median tok/s | runs | vs wasm |', '|---|---|---|---|---|');
  for (const [key, runs] of ph.samples) {
    const [batch, path] = key.split('|');
    const wasm = ph.samples.get(`${batch}|wasm`) ?? [];
    const ratios = runs.map((x, i) => (wasm[i] ? x / wasm[i] : undefined)).filter((x) => x !== undefined);
    const done = runs.filter((x) => x !== undefined);
    lines.push(
      `| ${path} | ${batch} | ${median(done).toFixed(1)} | ${done.map((x) => x.toFixed(1)).join(', ')} | ${ratios.length ? `${median(ratios).toFixed(2)}×` : '-'} |`,
    );
  }
  const json = join(out, `webgpu-${ph.name}.json`);
  lines.push('', existsSync(json) ? `(complete: ${json.split('/').pop()})` : '(no JSON: the phase did not finish)', '');
}
if (phasesFile && existsSync(phasesFile))
  lines.push('## phases', '', '```', readFileSync(phasesFile, 'utf8').trimEnd(), '```');
console.log(lines.join('\n'));
