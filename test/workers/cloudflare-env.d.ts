// The bindings `import { env } from 'cloudflare:workers'` has in the workerd tests (wrangler.toml), typed with
// the object classes: src/env.ts leaves them untyped, so that it imports no object.
import type { InferenceObject } from '../../src/objects/inference-object.js';

declare global {
  namespace Cloudflare {
    interface Env {
      INFERENCE: DurableObjectNamespace<InferenceObject>;
      MODELS: Fetcher;
    }
  }
}
