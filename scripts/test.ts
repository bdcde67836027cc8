// `npm test`: what CI runs after `npm ci`: the linter, the type check, then every vitest project (vitest.config.ts).
// Arguments go to vitest (`npm test -- test/kv-cache.test.ts`); `-- --help` prints the usage and runs nothing.
import { spawnSync } from 'node:child_process';
import { answerHelp } from './lib/help.js';

answerHelp(`Usage: npm test [-- vitest's arguments, e.g. test/foo.test.ts]
Runs npm run lint, npm run typecheck, then vitest run (every project of vitest.config.ts), stopping at the first failure.`);
const npm = process.platform === 'win32' ? 'npm.cmd' : 'npm';
const steps: [string, string[]][] = [
  [npm, ['run', 'lint']],
  [npm, ['run', 'typecheck']],
  ['npx', ['vitest', 'run', ...process.argv.slice(2)]],
];
for (const [command, args] of steps) {
  const run = spawnSync(command, args, { stdio: 'inherit' });
  if (run.status !== 0) process.exit(run.status ?? 1);
}
