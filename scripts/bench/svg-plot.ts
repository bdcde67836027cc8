// One plot for docs/benchmarks.md: aggregate decode tokens/s against concurrent sequences, a line per
// (dtype, backend) of bench-135m. Hand-written SVG: no plotting dependency for one chart.
import type { BackendResult } from './results.js';

const COLORS: Record<string, string> = { fp32: '#1f77b4', fp16: '#9467bd', int8: '#2ca02c', q4: '#d62728' };

export function decodePlotSvg(backends: BackendResult[], title: string): string {
  const series = backends.flatMap((b) =>
    b.variants
      .filter((v) => v.model === 'bench-135m' && Object.keys(v.decode).length > 1)
      .map((v) => ({
        label: `${v.dtype} ${b.backend}`,
        color: COLORS[v.dtype] ?? '#444',
        dashed: b.backend === 'wasm',
        points: Object.entries(v.decode)
          .map(([batch, s]) => [Number(batch), s.median] as const)
          .sort((x, y) => x[0] - y[0]),
      })),
  );
  const W = 720,
    H = 420,
    left = 70,
    right = 170,
    top = 40,
    bottom = 50;
  const batches = [...new Set(series.flatMap((s) => s.points.map((p) => p[0])))].sort((a, b) => a - b);
  const yMax = niceCeil(Math.max(1, ...series.flatMap((s) => s.points.map((p) => p[1]))));
  const lx = (b: number) => Math.log2(b);
  const [x0, x1] = [lx(batches[0] ?? 1), lx(batches.at(-1) ?? 2)];
  const px = (b: number) => left + ((lx(b) - x0) / Math.max(1e-9, x1 - x0)) * (W - left - right);
  const py = (y: number) => H - bottom - (y / yMax) * (H - top - bottom);
  const out: string[] = [];
  out.push(
    `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}" font-family="sans-serif" font-size="12">`,
  );
  // The <title> names the chart for screen readers and shows as a tooltip; the visible heading repeats it.
  out.push(`<title>${escapeXml(title)}</title>`);
  out.push(`<rect width="${W}" height="${H}" fill="white"/>`);
  out.push(
    `<text x="${W / 2 - right / 2 + left / 2}" y="22" text-anchor="middle" font-size="14">${escapeXml(title)}</text>`,
  );
  for (let i = 0; i <= 5; i++) {
    const y = (yMax * i) / 5;
    out.push(`<line x1="${left}" x2="${W - right}" y1="${py(y)}" y2="${py(y)}" stroke="#ddd"/>`);
    out.push(`<text x="${left - 6}" y="${py(y) + 4}" text-anchor="end">${Math.round(y)}</text>`);
  }
  for (const b of batches) {
    out.push(`<line x1="${px(b)}" x2="${px(b)}" y1="${top}" y2="${H - bottom}" stroke="#eee"/>`);
    out.push(`<text x="${px(b)}" y="${H - bottom + 16}" text-anchor="middle">${b}</text>`);
  }
  out.push(
    `<text x="${(left + W - right) / 2}" y="${H - 12}" text-anchor="middle">concurrent sequences (batch size)</text>`,
  );
  out.push(
    `<text x="18" y="${(top + H - bottom) / 2}" text-anchor="middle" transform="rotate(-90 18 ${(top + H - bottom) / 2})">aggregate decode tokens/s</text>`,
  );
  out.push(
    `<rect x="${left}" y="${top}" width="${W - left - right}" height="${H - top - bottom}" fill="none" stroke="#888"/>`,
  );
  series.forEach((s, i) => {
    const d = s.points.map(([b, y], j) => `${j ? 'L' : 'M'}${px(b).toFixed(1)},${py(y).toFixed(1)}`).join(' ');
    const dash = s.dashed ? ' stroke-dasharray="6 4"' : '';
    out.push(`<path d="${d}" fill="none" stroke="${s.color}" stroke-width="2"${dash}/>`);
    for (const [b, y] of s.points)
      out.push(`<circle cx="${px(b).toFixed(1)}" cy="${py(y).toFixed(1)}" r="3" fill="${s.color}"/>`);
    const ly = top + 10 + i * 20;
    out.push(
      `<line x1="${W - right + 12}" x2="${W - right + 40}" y1="${ly}" y2="${ly}" stroke="${s.color}" stroke-width="2"${dash}/>`,
    );
    out.push(`<text x="${W - right + 46}" y="${ly + 4}">${escapeXml(s.label)}</text>`);
  });
  out.push('</svg>');
  return `${out.join('\n')}\n`;
}

function niceCeil(x: number): number {
  const p = 10 ** Math.floor(Math.log10(x));
  for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= x) return m * p;
  return 10 * p;
}

const escapeXml = (s: string): string => s.replace(/&/g, '&amp;').replace(/</g, '&lt;');
