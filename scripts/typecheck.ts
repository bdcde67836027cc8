// `npm run typecheck`: tsc --noEmit over the project (tsconfig.json), with its own usage for `-- --help`.
import { spawnSync } from 'node:child_process';
import { createRequire } from 'node:module';
import { answerHelp } from './lib/help.js';

answerHelp(`Usage: npm run typecheck
Type-checks the whole project with tsc --noEmit (tsconfig.json: strict, ESM). Takes no options.`);
const tsc = createRequire(import.meta.url).resolve('typescript/bin/tsc');
const run = spawnSync(process.execPath, [tsc, '--noEmit', ...process.argv.slice(2)], { stdio: 'inherit' });
process.exit(run.status ?? 1);
