// `npm run deploy`: `wrangler deploy` with production settings (see docs/deploy.md). A deployed worker with
// no API_KEYS secret would run in dev mode and serve anyone, so that is refused unless --allow-open says
// it is meant. `npm run deploy -- --dry-run --outdir <dir>` bundles without an account (what CI checks).
import { spawn, spawnSync } from 'node:child_process';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import { deployArgs, hasApiKeysSecret, KERNELS_ONLY_CONFIG, kernelsOnlyConfig } from './deploy-args.js';

const extra = process.argv.slice(2);
const wrangler = join(dirname(createRequire(import.meta.url).resolve('wrangler/package.json')), 'bin', 'wrangler.js');

if (!extra.includes('--dry-run') && !extra.includes('--allow-open')) {
  const list = spawnSync(process.execPath, [wrangler, 'secret', 'list', '--format', 'json'], { encoding: 'utf8' });
  if (list.status !== 0 || !hasApiKeysSecret(list.stdout)) {
    console.error(
      list.status !== 0
        ? `could not list the worker's secrets (not logged in, or a first deploy?):\n${list.stderr.trim()}\n`
        : 'the worker has no API_KEYS secret: deployed like this it would accept every request.\n',
    );
    console.error('Set the keys first:  npx wrangler secret put API_KEYS   (comma-separated bearer keys)');
    console.error('or, to deploy an open service on purpose:  npm run deploy -- --allow-open');
    process.exit(1);
  }
}

if (extra.includes('--kernels-only'))
  writeFileSync(KERNELS_ONLY_CONFIG, kernelsOnlyConfig(readFileSync('wrangler.toml', 'utf8')));
const child = spawn(process.execPath, [wrangler, ...deployArgs(extra)], { stdio: 'inherit' });
child.on('exit', (code, signal) => {
  rmSync(KERNELS_ONLY_CONFIG, { force: true });
  process.exit(code ?? (signal ? 1 : 0));
});
