/** Flags `npm run deploy` understands itself; the rest go to `wrangler deploy` as they are. */
export const OWN_FLAGS = ['--allow-open', '--kernels-only'] as const;

/**
 * `--kernels-only`: wrangler.toml plus an [alias] table that swaps onnxruntime-web for
 * src/backends/onnxruntime-absent.ts, so its 14 MB wasm leaves the upload and the edge kernels serve every
 * model they cover (others are refused by name). A config table, not `--alias`: wrangler 4.86 ignores the
 * flag when bundling for deploy (measured: the upload stays 3.7 MiB gzip).
 */
export function kernelsOnlyConfig(wranglerToml: string): string {
  const alias = ['onnxruntime-web/wasm', 'onnxruntime-web/ort-wasm-simd-threaded.wasm'].map(
    (m) => `"${m}" = "./src/backends/onnxruntime-absent.ts"`,
  );
  return `${wranglerToml.trimEnd()}\n\n# Written by npm run deploy -- --kernels-only\n[alias]\n${alias.join('\n')}\n`;
}

/** Where --kernels-only writes its config: beside wrangler.toml, whose relative paths it keeps. */
export const KERNELS_ONLY_CONFIG = 'wrangler.kernels-only.toml';

/**
 * Vars a deployment must not inherit from wrangler.toml's dev defaults: loopback webhook callbacks are for
 * `wrangler dev`'s local receivers only.
 */
export const PRODUCTION_VARS: Record<string, string> = { ALLOW_LOOPBACK_CALLBACKS: 'false' };

/** `wrangler deploy`'s arguments: production vars first (a user's own --var after them wins), then the user's flags. */
export function deployArgs(extra: readonly string[]): string[] {
  const args = ['deploy'];
  for (const [name, value] of Object.entries(PRODUCTION_VARS)) args.push('--var', `${name}:${value}`);
  if (extra.includes('--kernels-only')) args.push('--config', KERNELS_ONLY_CONFIG);
  return [...args, ...extra.filter((a) => !(OWN_FLAGS as readonly string[]).includes(a))];
}

/** Whether `wrangler secret list --format json` output names API_KEYS. */
export function hasApiKeysSecret(listJson: string): boolean {
  try {
    const secrets = JSON.parse(listJson) as unknown;
    return (
      Array.isArray(secrets) &&
      secrets.some((s) => typeof s === 'object' && s !== null && (s as { name?: unknown }).name === 'API_KEYS')
    );
  } catch {
    return false;
  }
}
