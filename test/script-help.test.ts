// Every npm script answers `npm run <script> -- --help` as a user types it: its usage (`Usage: ...`) on stdout,
// exit 0, and nothing else done: no model built or imported, no file written or touched (git's status, the files
// under models/ and the repository's top-level entries are the same after), no network (deploy's help does not
// ask Cloudflare for secrets, so it needs no token).
import { execFile, spawnSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { expect, it } from 'vitest';
import { asksHelp, usageText } from '../scripts/lib/help.js';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const SCRIPTS = Object.keys(
  (JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { scripts: Record<string, string> }).scripts,
);
const run = promisify(execFile);

/** Top-level entries other suites write while this one runs (npm test runs files at once): not this test's concern. */
const OTHER_SUITES = new Set(['.scratch', '.wrangler', 'artifacts', 'node_modules', '.vitest']);

/**
 * What a script could have done: every file under models/ with its size and mtime (what npm start serves and the
 * model scripts write), the repository's top-level entries (a config, .deploy-assets, .import-staging, dist ...),
 * and git's view of the tracked and untracked files.
 */
function fingerprint(): string {
  const lines: string[] = [];
  const walk = (dir: string): void => {
    if (!existsSync(dir)) return;
    for (const e of readdirSync(dir, { withFileTypes: true })) {
      const path = join(dir, e.name);
      if (e.isDirectory()) walk(path);
      else {
        const s = statSync(path);
        lines.push(`${path} ${s.size} ${s.mtimeMs}`);
      }
    }
  };
  walk(join(ROOT, 'models'));
  const top = readdirSync(ROOT).filter((n) => !OTHER_SUITES.has(n));
  const status = spawnSync('git', ['status', '--porcelain'], { cwd: ROOT, encoding: 'utf8' }).stdout;
  return `${lines.sort().join('\n')}\n${top.sort().join(' ')}\n${status}`;
}

it('the helper: --help or -h anywhere asks; the text starts "Usage: " whatever the script wrote', () => {
  expect(asksHelp(['--model', 'x', '--help'])).toBe(true);
  expect(asksHelp(['-h'])).toBe(true);
  expect(asksHelp(['--model', 'help'])).toBe(false);
  expect(usageText('usage: model:pull -- <org>/<repo>')).toBe('Usage: model:pull -- <org>/<repo>\n');
});

it('npm run <script> -- --help: usage on stdout, exit 0, no side effects, for every script', {
  timeout: 600_000,
}, async () => {
  expect(SCRIPTS.length).toBeGreaterThan(15);
  const before = fingerprint();
  // No Cloudflare account, no proxy: a script that reached for the network would fail or hang, not pass.
  const env = {
    ...process.env,
    CLOUDFLARE_API_TOKEN: '',
    HTTPS_PROXY: 'http://127.0.0.1:9',
    HTTP_PROXY: 'http://127.0.0.1:9',
  };
  const commands: { name: string; argv: string[] }[] = [
    ...SCRIPTS.map((s) => ({ name: `npm run ${s}`, argv: ['npm', 'run', '--silent', s, '--', '--help'] })),
    { name: 'gguf-writer', argv: ['npx', 'tsx', 'scripts/model/gguf-writer.ts', '--help'] },
  ];
  const failures: string[] = [];
  // A few at a time: each is a tsx start-up, and the machine is shared.
  const queue = [...commands];
  await Promise.all(
    Array.from({ length: 3 }, async () => {
      for (let next = queue.shift(); next; next = queue.shift()) {
        const { name, argv } = next;
        const [cmd, ...args] = argv;
        try {
          const { stdout } = await run(cmd, args, { cwd: ROOT, env, timeout: 120_000 });
          if (!/^Usage: /m.test(stdout))
            failures.push(`${name}: no "Usage: " line in ${JSON.stringify(stdout.slice(0, 200))}`);
        } catch (err) {
          const e = err as { code?: number; stderr?: string; stdout?: string };
          failures.push(`${name}: exit ${e.code} ${(e.stderr || e.stdout || '').slice(0, 300)}`);
        }
      }
    }),
  );
  expect(failures).toEqual([]);
  expect(fingerprint()).toBe(before);
});
