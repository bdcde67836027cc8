// The worker products-workerd.ts runs in `wrangler dev`: GET /?build=&form=&k=&n=&rows=&copies=&calls= sets up that
// product once (productCall), or with &attention=N a decode step's attention after N tokens (attentionCall), and
// runs it `calls` times; the caller times the request. Any other path answers
// 200, so the dev server's readiness check passes.
import { instantiateKernels } from '../../src/engine/runners/wasm/edge-kernels.js';
import dotAdd from '../../src/engine/runners/wasm/edge-kernels-dot-add.wasm';
import baseline from '../../src/engine/runners/wasm/edge-kernels.wasm';
import relaxed from '../../src/engine/runners/wasm/edge-kernels-relaxed.wasm';
import relaxedWide from '../../src/engine/runners/wasm/edge-kernels-relaxed-wide.wasm';
import { attentionCall } from './attention-setup.js';
import { type Form, FORMS, productCall } from './product-setup.js';

const BUILDS: Record<string, WebAssembly.Module> = {
  baseline,
  relaxed,
  'relaxed-wide': relaxedWide,
  'dot-add': dotAdd,
};
const calls = new Map<string, () => void>();

/** Another build, as 'variant' (products-workerd.ts --variant: an entry that imports its file calls this). */
export function useVariant(module: WebAssembly.Module): void {
  BUILDS.variant = module;
}

export default {
  async fetch(request: Request): Promise<Response> {
    const q = new URL(request.url).searchParams;
    const build = q.get('build');
    if (!build) return new Response('ok');
    const form = q.get('form') as Form;
    const context = q.get('attention');
    const key = `${build} ${form} ${q.get('k')} ${q.get('n')} ${q.get('rows')} ${q.get('copies')} ${context}`;
    let call = calls.get(key);
    if (!call) {
      const module = BUILDS[build];
      if (!module || !(context || form in FORMS))
        return new Response(`no build ${build} or form ${form}`, { status: 400 });
      const b = await instantiateKernels(module);
      const [k, n, rows, copies] = ['k', 'n', 'rows', 'copies'].map((p) => Number(q.get(p) ?? 1));
      call = context
        ? attentionCall(b, Number(context)).call
        : productCall(b, form, k, n, rows, build === 'baseline' ? 2 : 1, copies).call;
      calls.set(key, call);
    }
    for (let i = Number(q.get('calls')); i > 0; i--) call();
    return new Response('ok');
  },
};
