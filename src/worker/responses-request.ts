/**
 * POST /v1/responses's body, checked, as the object's ResponseSpec (less its id and time): input items to
 * chat messages, Responses-shaped tools to chat completions' (so tools.ts forces and parses them as it does
 * for chat), `text.format` to a grammar (structured.ts). Anything the API has and we do not is refused by
 * name, never dropped silently.
 */
import type { Constrained, JsonValue } from '../engine/constraints/spec.js';
import type { ChatMessage } from '../engine/request.js';
import { itemIds, outputText, type InputItem } from '../responses/output-items.js';
import type { ResponseSpec } from '../responses/response-view.js';
import type { JsonObject } from './body.js';
import { ApiError, badParam } from './errors.js';
import { optBoolean, optInteger, optNumber, optString } from './request-params.js';
import { structuredConstraint } from './structured.js';
import { toolUse } from './tools.js';

const KNOWN = new Set([
  'model',
  'input',
  'instructions',
  'tools',
  'tool_choice',
  'parallel_tool_calls',
  'text',
  'temperature',
  'top_p',
  'max_output_tokens',
  'metadata',
  'store',
  'stream',
  'previous_response_id',
  'conversation',
  'reasoning',
  'user',
  'truncation',
  'include',
  'chat_template_kwargs',
  'prompt_cache_key',
  'safety_identifier',
  'service_tier',
  'background',
]);

export type ResponseRequest = Omit<ResponseSpec, 'id' | 'created_at'> & { stream: boolean };

const isObject = (v: unknown): v is JsonObject => typeof v === 'object' && v !== null && !Array.isArray(v);

export function responseRequest(body: JsonObject, model: string): ResponseRequest {
  for (const key of Object.keys(body))
    if (!KNOWN.has(key)) throw badParam(key, `unknown parameter '${key}'`, 'unknown_parameter');
  const previous = optString(body, 'previous_response_id') ?? null;
  const conversation = conversationId(body.conversation);
  if (conversation !== null && previous !== null)
    throw badParam(
      'conversation',
      'give previous_response_id or conversation, not both: a response continues one of them',
      'invalid_value',
    );
  if (body.background === true)
    throw badParam('background', 'background responses are not supported', 'unsupported_parameter');
  const truncation = optString(body, 'truncation');
  if (truncation !== undefined && truncation !== 'disabled')
    throw badParam(
      'truncation',
      'only truncation "disabled" is supported: a history past the context window is refused',
      'unsupported_parameter',
    );
  const { input, messages } = inputItems(body.input);
  const instructions = optString(body, 'instructions') ?? null;

  const tools = responseTools(body);
  const format = textFormat(body.text);
  if (format && tools.constraint)
    throw badParam('tool_choice', 'a forced tool call cannot be combined with text.format', 'invalid_value');
  const maxOutput = optInteger(body, 'max_output_tokens');
  if (maxOutput !== undefined && maxOutput < 1)
    throw badParam('max_output_tokens', 'max_output_tokens must be at least 1', 'invalid_value');
  const kwargs = body.chat_template_kwargs;
  if (kwargs !== undefined && kwargs !== null && !isObject(kwargs))
    throw badParam('chat_template_kwargs', 'chat_template_kwargs must be an object');
  const reasoning = body.reasoning ?? null;
  if (reasoning !== null && !isObject(reasoning)) throw badParam('reasoning', 'reasoning must be an object');
  return {
    model,
    instructions,
    input,
    messages,
    tools: tools.tools ?? null,
    parse_tools: tools.parse,
    constraint: format ?? tools.constraint,
    temperature: optNumber(body, 'temperature') ?? null,
    top_p: optNumber(body, 'top_p') ?? null,
    max_output_tokens: maxOutput ?? null,
    store: optBoolean(body, 'store') ?? true,
    stream: optBoolean(body, 'stream') ?? false,
    previous_response_id: previous,
    conversation,
    metadata: responseMetadata(body.metadata),
    chat_template_kwargs: isObject(kwargs) ? (kwargs as Record<string, JsonValue>) : undefined,
    echo: {
      tools: (Array.isArray(body.tools) ? body.tools : []) as JsonValue[],
      tool_choice: (body.tool_choice ?? 'auto') as JsonValue,
      parallel_tool_calls: (body.parallel_tool_calls ?? true) as boolean,
      text: (isObject(body.text) ? body.text : { format: { type: 'text' } }) as JsonValue,
      reasoning: { effort: null, summary: null, ...(reasoning ?? {}) } as JsonValue,
      user: optString(body, 'user') ?? null,
    },
  };
}

/** `conversation`: its id, as a string or `{id}`. */
function conversationId(v: unknown): string | null {
  if (v === undefined || v === null) return null;
  const id = isObject(v) ? v.id : v;
  if (typeof id !== 'string' || id === '')
    throw badParam('conversation', 'conversation must be a conversation id or {"id": "conv_…"}');
  return id;
}

/** Text of a message's content: a string, or parts of input_text / output_text. */
function partsText(v: unknown, param: string): string {
  if (typeof v === 'string') return v;
  if (!Array.isArray(v)) throw badParam(param, `${param} must be a string or an array of content parts`);
  return v
    .map((part: unknown, i) => {
      const p = part as JsonObject;
      if (!isObject(p) || typeof p.type !== 'string')
        throw badParam(`${param}[${i}]`, `${param}[${i}] must be a content part with a type`);
      if (p.type !== 'input_text' && p.type !== 'output_text' && p.type !== 'text')
        throw badParam(
          `${param}[${i}].type`,
          `${param}[${i}] is ${JSON.stringify(p.type)}: only text parts are supported by this model`,
          'unsupported_value',
        );
      if (typeof p.text !== 'string') throw badParam(`${param}[${i}].text`, `${param}[${i}].text must be a string`);
      return p.text;
    })
    .join('');
}

const ROLES = ['user', 'system', 'developer', 'assistant'] as const;

/**
 * `input`: a string (one user message) or items: messages, `function_call` (a call the model made, sent
 * back without previous_response_id) and `function_call_output`; `reasoning` items are accepted and left
 * out of the prompt, as templates leave earlier reasoning out. Items get ids (with a placeholder stem
 * the route replaces once the response's id is known).
 */
export function inputItems(raw: unknown): { input: InputItem[]; messages: ChatMessage[] } {
  if (raw === undefined || raw === null) throw badParam('input', 'input is required');
  const items: unknown[] = typeof raw === 'string' ? [{ role: 'user', content: raw }] : (raw as unknown[]);
  if (!Array.isArray(items) || items.length === 0 || (typeof raw === 'string' && raw.length === 0))
    throw badParam('input', 'input must be a non-empty string or a non-empty array of items', 'invalid_value');
  const input: InputItem[] = [];
  const messages: ChatMessage[] = [];
  items.forEach((value, i) => {
    const at = `input[${i}]`;
    if (!isObject(value)) throw badParam(at, `${at} must be an object`);
    const type = value.type ?? (value.role !== undefined ? 'message' : undefined);
    const id = itemIds.input('', i);
    if (type === 'message') {
      const role = value.role;
      if (!ROLES.includes(role as (typeof ROLES)[number]))
        throw badParam(`${at}.role`, `${at}.role must be one of ${ROLES.join(', ')}`, 'invalid_value');
      const text = partsText(value.content, `${at}.content`);
      input.push({
        type: 'message',
        id,
        status: 'completed',
        role: role as (typeof ROLES)[number],
        content: [role === 'assistant' ? outputText(text) : { type: 'input_text', text }],
      });
      messages.push({ role: role === 'developer' ? 'system' : (role as string), content: text });
    } else if (type === 'function_call') {
      const { call_id: callId, name, arguments: args } = value;
      if (typeof callId !== 'string' || typeof name !== 'string' || typeof args !== 'string')
        throw badParam(at, `${at} (function_call) needs call_id, name and arguments as strings`);
      input.push({ type: 'function_call', id, call_id: callId, name, arguments: args, status: 'completed' });
      const call = { id: callId, type: 'function' as const, function: { name, arguments: args } };
      const last = messages.at(-1);
      if (last?.role === 'assistant')
        messages[messages.length - 1] = { ...last, tool_calls: [...(last.tool_calls ?? []), call] };
      else messages.push({ role: 'assistant', content: '', tool_calls: [call] });
    } else if (type === 'function_call_output') {
      const callId = value.call_id;
      if (typeof callId !== 'string') throw badParam(`${at}.call_id`, `${at}.call_id must be a string`);
      const output = partsText(value.output, `${at}.output`);
      input.push({ type: 'function_call_output', id, call_id: callId, output, status: 'completed' });
      messages.push({ role: 'tool', tool_call_id: callId, content: output });
    } else if (type === 'reasoning') {
      // Earlier reasoning, sent back as a client without stored state does: not part of the next prompt.
    } else
      throw badParam(
        `${at}.type`,
        `${at} has type ${JSON.stringify(type)}; supported: message, function_call, function_call_output, reasoning`,
        'invalid_value',
      );
  });
  if (messages.length === 0) throw badParam('input', 'input has no message or function_call_output', 'invalid_value');
  return { input, messages };
}

/** Function tools in the Responses shape (`{type, name, parameters}`) read as chat completions' tools are. */
function responseTools(body: JsonObject): ReturnType<typeof toolUse> {
  const raw = body.tools;
  const tools = Array.isArray(raw)
    ? raw.map((t: unknown, i) => {
        if (!isObject(t) || t.type !== 'function')
          throw badParam(
            `tools[${i}].type`,
            `tools[${i}] must be {"type": "function", "name": ..., "parameters": ...}: only function tools are supported`,
            'unsupported_value',
          );
        const { type, name, description, parameters } = t;
        return {
          type,
          function: {
            name,
            ...(description !== undefined ? { description } : {}),
            ...(parameters !== undefined && parameters !== null ? { parameters } : {}),
          },
        };
      })
    : raw;
  let choice = body.tool_choice;
  if (isObject(choice) && choice.type === 'function') choice = { type: 'function', function: { name: choice.name } };
  try {
    return toolUse({ tools, tool_choice: choice, parallel_tool_calls: body.parallel_tool_calls } as JsonObject);
  } catch (err) {
    // Chat completions' parameter paths, spelled as this API spells them.
    if (err instanceof ApiError && err.param)
      throw new ApiError(
        err.status,
        err.message.replace('.function.', '.'),
        err.type,
        err.param.replace('.function.', '.'),
        err.code,
      );
    throw err;
  }
}

/** `text.format`: text, json_object, or json_schema {name, schema, strict} through the grammar engine. */
function textFormat(text: unknown): Constrained | undefined {
  if (text === undefined || text === null) return undefined;
  if (!isObject(text)) throw badParam('text', 'text must be an object');
  const format = text.format;
  if (format === undefined || format === null) return undefined;
  if (!isObject(format)) throw badParam('text.format', 'text.format must be an object');
  const responseFormat =
    format.type === 'json_schema'
      ? { type: 'json_schema', json_schema: { name: format.name, schema: format.schema, strict: format.strict } }
      : format;
  try {
    const constraint = structuredConstraint({ response_format: responseFormat } as JsonObject);
    return constraint && { ...constraint, param: 'text.format.schema' };
  } catch (err) {
    if (err instanceof ApiError)
      throw new ApiError(
        err.status,
        err.message
          .replaceAll('response_format.json_schema', 'text.format')
          .replaceAll('response_format', 'text.format'),
        err.type,
        (err.param ?? 'text.format')
          .replace('response_format.json_schema', 'text.format')
          .replace('response_format', 'text.format'),
        err.code,
      );
    throw err;
  }
}

/** OpenAI's metadata: at most 16 string pairs, keys up to 64 characters, values up to 512. */
export function responseMetadata(v: unknown): Record<string, string> {
  if (v === undefined || v === null) return {};
  if (!isObject(v)) throw badParam('metadata', 'metadata must be an object of strings');
  const entries = Object.entries(v);
  if (entries.length > 16) throw badParam('metadata', 'metadata has at most 16 keys', 'invalid_value');
  for (const [k, value] of entries) {
    if (k.length > 64)
      throw badParam('metadata', `metadata key '${k.slice(0, 16)}…' is longer than 64 characters`, 'invalid_value');
    if (typeof value !== 'string' || value.length > 512)
      throw badParam(`metadata.${k}`, `metadata.${k} must be a string of at most 512 characters`, 'invalid_value');
  }
  return v as Record<string, string>;
}
