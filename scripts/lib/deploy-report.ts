// What `npm run deploy -- --dry-run` says besides wrangler's own log: the upload against both Workers plans, the
// secrets and bindings a real deploy needs, and the start check's verdict on the model (a deploy of a model that
// `npm start` refuses would only fail at its first request).

/** Workers' upload limits, compressed (developers.cloudflare.com/workers/platform/limits/): Free 3 MB, Paid 10 MB. */
export const PLAN_LIMITS_KIB = { free: 3 * 1024, paid: 10 * 1024 } as const;

/** The bundle's gzip size against both plans, and the flag that brings it under the free one. */
export function planVerdict(gzipKib: number, kernelsOnly: boolean): string {
  const size = `${Math.round(gzipKib).toLocaleString('en')} KiB gzip`;
  if (gzipKib <= PLAN_LIMITS_KIB.free) return `${size}: within the Free plan's 3 MB and the Paid plan's 10 MB`;
  if (gzipKib <= PLAN_LIMITS_KIB.paid)
    return `${size}: over the Free plan's 3 MB, within the Paid plan's 10 MB${kernelsOnly ? '' : '; --kernels-only (onnxruntime-web left out, the edge kernels serve the Llama family) fits the Free plan'}`;
  return `${size}: over the Paid plan's 10 MB too: this will not deploy`;
}

/**
 * What a real deploy needs that a dry run does not ask for: the secrets (API_KEYS, or the open service on purpose;
 * OWNER_SECRET before keys are handed out) and the R2 bucket when the model is read from it.
 */
export function deployNeeds(o: { modelInR2: boolean; allowOpen: boolean; model: string }): string[] {
  return [
    o.allowOpen
      ? 'secret API_KEYS: not needed with --allow-open (the service answers every request)'
      : 'secret API_KEYS (comma-separated name:key bearer keys): npx wrangler secret put API_KEYS; without it the deploy is refused (or --allow-open)',
    'secret OWNER_SECRET (the key of owner ids; set it once, before handing out keys): npx wrangler secret put OWNER_SECRET',
    o.modelInR2
      ? `R2 bucket edge-infer-models (binding MODEL_BUCKET) holding ${o.model}/: npx wrangler r2 bucket create edge-infer-models, then npm run model:upload -- models/${o.model} --remote`
      : 'no R2 bucket: the model goes up with the assets',
    'a Cloudflare account: npx wrangler login (once)',
  ];
}
