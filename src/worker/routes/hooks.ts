import { type Context, Hono } from 'hono';
import type { Env } from '../../env.js';
import type { RpcResult } from '../../objects/rpc-error.js';
import { ANONYMOUS_OWNER, ownerIds, type Tenant } from '../../objects/tenancy/tenant.js';
import type { HookView } from '../../objects/webhooks/hooks.js';
import type { HookAddress, HookInput } from '../../objects/webhooks/service.js';
import type { AppEnv } from '../app-env.js';
import { requireApiKey } from '../auth.js';
import { readBodyBytes, readJsonObject, type JsonObject } from '../body.js';
import { ApiError, badParam, unwrap } from '../errors.js';
import { shardLimits } from '../limits.js';
import { rateLimitHeaders } from '../rate-limit-headers.js';
import { shardForHook, shardStub } from '../routing.js';
import { issuedShard, issueId } from '../shard-ids.js';
import { soleTenant } from '../../objects/tenancy/api-keys.js';
import { SAMPLING_FIELDS, sessionSampling } from './sessions.js';
import { checkModelOrAdapter } from '../request-params.js';

/**
 * Webhook-triggered generation. PUT|GET|DELETE /v1/hooks/:name configure a hook (API key; names are per
 * key, so two keys can both have `summarise`). POST /v1/hooks/:ref receives an event, authenticated by
 * its Standard Webhooks signature instead, and answers 202 with the job that will generate and deliver the
 * result. `ref` is the hook's path id (`hk_<shard>.<random>`, given at creation: its `id` and `url`), or,
 * where only one owner can be meant (dev mode, a single key, hooks made before tenants), its name. A hook
 * lives on the shard its (owner, name) hashes to, which its id names.
 */
const hooks = new Hono<AppEnv>();

const NAME = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$/;
/** Hook ids are `hk_` + an id of the shard-ids.ts kind; names may not start so. */
const ID_PREFIX = 'hk_';

const noHook = (ref: string, hint = ''): ApiError =>
  new ApiError(404, `no hook '${ref}'${hint}`, 'invalid_request_error', null, 'hook_not_found');

function hookName(name: string): string {
  if (!NAME.test(name)) throw noHook(name);
  return name;
}

/** Shards where `tenant`'s hook `name` may be: its own, then, for a tenant that holds them, a pre-tenant hook's. */
function homes(env: Env, tenant: Tenant, name: string): number[] {
  const own = shardForHook(env, tenant.owner, name);
  if (!tenant.legacy) return [own];
  const legacy = shardForHook(env, ANONYMOUS_OWNER, name);
  return legacy === own ? [own] : [own, legacy];
}

const notFoundOnShard = <T>(result: RpcResult<T>): boolean => !result.ok && result.error.code === 'hook_not_found';

/** The hook as the API shows it, with the URL its events go to (null for a pre-tenant hook until its next PUT). */
const shown = (c: Context<AppEnv>, hook: HookView) => ({
  ...hook,
  url: hook.id === null ? null : `${new URL(c.req.url).origin}/v1/hooks/${hook.id}`,
});

hooks.on(['PUT', 'GET', 'DELETE'], '/:name', requireApiKey);

hooks.put('/:name', async (c) => {
  const name = c.req.param('name');
  if (!NAME.test(name))
    throw badParam(
      'name',
      'hook names are 1-64 characters of letters, digits, _ . - (starting with a letter or digit)',
      'invalid_value',
    );
  if (name.startsWith(ID_PREFIX))
    throw badParam('name', `hook names may not start with '${ID_PREFIX}' (hook ids do)`, 'invalid_value');
  const input = hookInput(await readJsonObject(c), c.env);
  const tenant = c.get('tenant');
  const [own, ...others] = homes(c.env, tenant, name);
  // The service's own host, so a callback_url cannot deliver into the service itself.
  const selfHost = new URL(c.req.url).host;
  const put = async (shard: number, create: boolean) =>
    shardStub(c.env, shard).putHook(
      tenant,
      name,
      input,
      ID_PREFIX + (await issueId(c.env, shard)),
      create,
      shardLimits(c.env, shard),
      selfHost,
    );
  // An existing hook is replaced where it is (its id names that shard); a new one is made on the tenant's own.
  let result = await put(own, others.length === 0);
  for (const shard of others) if (notFoundOnShard(result)) result = await put(shard, false);
  if (notFoundOnShard(result)) result = await put(own, true);
  const { hook, created } = unwrap(result);
  return c.json(shown(c, hook), created ? 201 : 200);
});

/** Asks each of the tenant's homes for the hook until one has it. */
async function onHome<T>(
  c: Context<AppEnv>,
  ask: (stub: ReturnType<typeof shardStub>, tenant: Tenant, name: string) => Promise<RpcResult<T>>,
): Promise<T> {
  const name = hookName(c.req.param('name') ?? '');
  const tenant = c.get('tenant');
  for (const shard of homes(c.env, tenant, name)) {
    const result = await ask(shardStub(c.env, shard), tenant, name);
    if (!notFoundOnShard(result)) return unwrap(result);
  }
  throw noHook(name);
}

hooks.get('/:name', async (c) => c.json(shown(c, await onHome(c, (stub, tenant, name) => stub.getHook(tenant, name)))));

hooks.delete('/:name', async (c) => c.json(await onHome(c, (stub, tenant, name) => stub.deleteHook(tenant, name))));

hooks.post('/:ref', async (c) => {
  const ref = hookName(c.req.param('ref'));
  // The signature covers the exact bytes, so the body is passed on as they arrived, unparsed.
  const body = await readBodyBytes(c);
  const headers: Record<string, string> = {};
  for (const h of ['webhook-id', 'webhook-timestamp', 'webhook-signature']) {
    const v = c.req.header(h);
    if (v !== undefined) headers[h] = v;
  }
  const targets = await addressed(c.env, ref);
  for (const { shard, address } of targets) {
    const result = await shardStub(c.env, shard).receiveHookEvent(
      address,
      headers,
      body,
      await issueId(c.env, shard),
      shardLimits(c.env, shard),
    );
    if (notFoundOnShard(result)) continue;
    const accepted = unwrap(result);
    // A replayed webhook-id is answered with the job it created the first time.
    return c.json(
      { job_id: accepted.job_id, object: 'job', status: accepted.status },
      accepted.duplicate ? 200 : 202,
      rateLimitHeaders(accepted.rateLimit),
    );
  }
  const several = !ref.startsWith(ID_PREFIX) && (await soleTenant(c.env)) === undefined;
  throw noHook(ref, several ? ': with several keys, send events to the url (hk_…) its PUT returned' : '');
});

/**
 * Where an inbound event for `ref` may go: the shard a hook id names; or, for a name, the one owner that
 * can be meant (dev mode, a single key) and the hooks made before tenants, which kept their shard.
 */
async function addressed(env: Env, ref: string): Promise<{ shard: number; address: HookAddress }[]> {
  if (ref.startsWith(ID_PREFIX)) {
    const shard = await issuedShard(env, ref.slice(ID_PREFIX.length));
    return shard === null ? [] : [{ shard, address: { id: ref } }];
  }
  const sole = await soleTenant(env);
  const tenant = sole ?? { owner: ANONYMOUS_OWNER, name: '', legacy: true };
  const owners = [...new Set(ownerIds(tenant))];
  return homes(env, tenant, ref).map((shard) => ({ shard, address: { name: ref, owners } }));
}

/** The hook configuration's JSON types; values (secret, URL, template, params) are checked by the object. */
function hookInput(body: JsonObject, env: Env): HookInput {
  for (const key of Object.keys(body)) {
    if (!['template', 'callback_url', 'secret', 'params', 'mode', 'model'].includes(key))
      throw badParam(key, `unknown parameter '${key}'`, 'unknown_parameter');
  }
  for (const key of ['template', 'callback_url', 'secret']) {
    if (typeof body[key] !== 'string') throw badParam(key, `${key} is required and must be a string`);
  }
  const params = body.params ?? {};
  if (typeof params !== 'object' || params === null || Array.isArray(params))
    throw badParam('params', 'params must be an object of sampling parameters');
  const mode = body.mode ?? 'chat';
  if (mode !== 'chat' && mode !== 'completion')
    throw badParam('mode', "mode must be 'chat' or 'completion'", 'invalid_value');
  // `model` may name one of the model's LoRA adapters: the hook's jobs run on it.
  const { adapter } = checkModelOrAdapter(body, env);
  const sampling = sessionSampling(params as JsonObject, SAMPLING_FIELDS, 'params.');
  return {
    template: body.template as string,
    callback_url: body.callback_url as string,
    secret: body.secret as string,
    params: adapter ? { ...sampling, adapter } : sampling,
    mode,
  };
}

export default hooks;
