// A one-line progress bar on a terminal (redrawn in place), or one line per finished file otherwise
// (logs, CI), so piped output stays readable.
import type { Progress } from './hub-client.js';

const MiB = 2 ** 20;

export function renderBar(p: Progress, bytesPerSecond: number, width = 30): string {
  const frac = p.total > 0 ? Math.min(1, p.done / p.total) : 0;
  const filled = Math.round(frac * width);
  const rate = bytesPerSecond > 0 ? ` ${(bytesPerSecond / MiB).toFixed(1)} MiB/s` : '';
  return `${p.file} [${'#'.repeat(filled)}${'.'.repeat(width - filled)}] ${(frac * 100).toFixed(0).padStart(3)}% ${(p.done / MiB).toFixed(1)}/${(p.total / MiB).toFixed(1)} MiB${rate}`;
}

export function progressPrinter(stream: NodeJS.WriteStream = process.stderr): (p: Progress) => void {
  let file = '';
  let start = 0;
  let startBytes = 0;
  let last = 0;
  return (p) => {
    const now = performance.now();
    if (p.file !== file) {
      file = p.file;
      start = now;
      startBytes = p.done;
    }
    const rate = now > start ? ((p.done - startBytes) / (now - start)) * 1000 : 0;
    if (stream.isTTY) {
      if (!p.finished && now - last < 100) return;
      last = now;
      stream.write(`\r\x1b[2K${renderBar(p, rate)}${p.finished ? '\n' : ''}`);
    } else if (p.finished) {
      stream.write(`${renderBar(p, rate)}\n`);
    }
  };
}
