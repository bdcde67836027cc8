import { Hono } from 'hono';
import type { Env } from '../../env.js';
import type { HookInput } from '../../objects/webhooks/service.js';
import { requireApiKey } from '../auth.js';
import { readBodyBytes, readJsonObject, type JsonObject } from '../body.js';
import { ApiError, badParam, unwrap } from '../errors.js';
import { shardForName, shardStub } from '../routing.js';
import { issueId } from '../shard-ids.js';
import { SAMPLING_FIELDS, sessionSampling } from './sessions.js';

/**
 * Webhook-triggered generation. PUT|GET|DELETE /v1/hooks/:name configure a hook (API key); POST
 * /v1/hooks/:name receives an event, authenticated by its Standard Webhooks signature instead, and
 * answers 202 with the job that will generate and deliver the result. A hook lives on the shard its
 * name hashes to.
 */
const hooks = new Hono<{ Bindings: Env }>();

const NAME = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$/;

function hookName(name: string): string {
  if (!NAME.test(name)) throw new ApiError(404, `no hook '${name}'`, 'invalid_request_error', null, 'hook_not_found');
  return name;
}

const stubFor = (env: Env, name: string) => shardStub(env, shardForName(env, name));

hooks.on(['PUT', 'GET', 'DELETE'], '/:name', requireApiKey);

hooks.put('/:name', async (c) => {
  const name = c.req.param('name');
  if (!NAME.test(name))
    throw badParam(
      'name',
      'hook names are 1-64 characters of letters, digits, _ . - (starting with a letter or digit)',
      'invalid_value',
    );
  const body = await readJsonObject(c);
  const result = unwrap(await stubFor(c.env, name).putHook(name, hookInput(body)));
  return c.json(result.hook, result.created ? 201 : 200);
});

hooks.get('/:name', async (c) => {
  const name = hookName(c.req.param('name'));
  return c.json(unwrap(await stubFor(c.env, name).getHook(name)));
});

hooks.delete('/:name', async (c) => {
  const name = hookName(c.req.param('name'));
  return c.json(unwrap(await stubFor(c.env, name).deleteHook(name)));
});

hooks.post('/:name', async (c) => {
  const name = hookName(c.req.param('name'));
  // The signature covers the exact bytes, so the body is passed on as text, unparsed.
  const body = new TextDecoder().decode(await readBodyBytes(c));
  const headers: Record<string, string> = {};
  for (const h of ['webhook-id', 'webhook-timestamp', 'webhook-signature']) {
    const v = c.req.header(h);
    if (v !== undefined) headers[h] = v;
  }
  const shard = shardForName(c.env, name);
  const accepted = unwrap(
    await shardStub(c.env, shard).receiveHookEvent(name, headers, body, await issueId(c.env, shard)),
  );
  // A replayed webhook-id is answered with the job it created the first time.
  return c.json({ job_id: accepted.job_id, object: 'job', status: accepted.status }, accepted.duplicate ? 200 : 202);
});

/** The hook configuration's JSON types; values (secret, URL, template, params) are checked by the object. */
function hookInput(body: JsonObject): HookInput {
  for (const key of Object.keys(body)) {
    if (!['template', 'callback_url', 'secret', 'params', 'mode'].includes(key))
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
  return {
    template: body.template as string,
    callback_url: body.callback_url as string,
    secret: body.secret as string,
    params: sessionSampling(params as JsonObject, SAMPLING_FIELDS, 'params.'),
    mode,
  };
}

export default hooks;
