import type { Env } from '../env.js';
import type { Tenant } from '../objects/tenancy/tenant.js';

/** The Hono environment of every route: the bindings, and the tenant requireApiKey resolved from the key. */
export type AppEnv = { Bindings: Env; Variables: { tenant: Tenant } };
