// Bindings the workerd tests use (wrangler.toml).
declare module 'cloudflare:workers' {
  export const env: { MODELS: { fetch(input: string): Promise<Response> } };
}
