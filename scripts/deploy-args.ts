/** Flags `npm run deploy` understands itself; the rest go to `wrangler deploy` as they are. */
export const OWN_FLAGS = ['--allow-open'] as const;

/**
 * Vars a deployment must not inherit from wrangler.toml's dev defaults: loopback webhook callbacks are for
 * `wrangler dev`'s local receivers only.
 */
export const PRODUCTION_VARS: Record<string, string> = { ALLOW_LOOPBACK_CALLBACKS: 'false' };

/** `wrangler deploy`'s arguments: production vars first (a user's own --var after them wins), then the user's flags. */
export function deployArgs(extra: readonly string[]): string[] {
  const args = ['deploy'];
  for (const [name, value] of Object.entries(PRODUCTION_VARS)) args.push('--var', `${name}:${value}`);
  return [...args, ...extra.filter((a) => !(OWN_FLAGS as readonly string[]).includes(a))];
}

/** Whether `wrangler secret list --format json` output names API_KEYS. */
export function hasApiKeysSecret(listJson: string): boolean {
  try {
    const secrets = JSON.parse(listJson) as unknown;
    return Array.isArray(secrets) && secrets.some((s) => typeof s === 'object' && s !== null && (s as { name?: unknown }).name === 'API_KEYS');
  } catch {
    return false;
  }
}
