import type { Constrained, ConstraintSpec, JsonSchema } from '../engine/constraints/spec.js';
import type { JsonObject } from './body.js';
import { badParam } from './errors.js';

/**
 * Structured-output fields to the engine's constraint. OpenAI: `response_format` {type: text |
 * json_object | json_schema}. vLLM (current names): `structured_outputs` {json | regex | choice | grammar
 * | json_object}, exactly one key; its older top-level `guided_json`, `guided_regex`, `guided_choice`,
 * `guided_grammar` are accepted too. At most one source per request. Shapes are checked here; what the
 * grammar engine cannot enforce is the engine's to refuse (400, naming the keyword).
 */
const WHITESPACE = 'disable_any_whitespace';

/**
 * vLLM's `structured_outputs.disable_any_whitespace`: false frees whitespace between JSON tokens (in
 * response formats and tool-call arguments), true keeps it fixed; absent, the server's default
 * (DISABLE_ANY_WHITESPACE, true unless set). Other constraints ignore it.
 */
export function withRequestWhitespace(constraint: Constrained | undefined, body: JsonObject): Constrained | undefined {
  const so = body.structured_outputs as JsonObject | undefined | null;
  const value = so?.[WHITESPACE];
  if (value === undefined || value === null || !constraint) return constraint;
  if (typeof value !== 'boolean')
    throw badParam(`structured_outputs.${WHITESPACE}`, `structured_outputs.${WHITESPACE} must be a boolean`);
  const { spec } = constraint;
  if (spec.type !== 'json_object' && spec.type !== 'json_schema' && spec.type !== 'tool_calls') return constraint;
  return { ...constraint, spec: { ...spec, anyWhitespace: !value } };
}

export function structuredConstraint(body: JsonObject): Constrained | undefined {
  const found: Constrained[] = [];
  const format = responseFormat(body);
  if (format) found.push(format);
  const so = body.structured_outputs;
  if (so !== undefined && so !== null) {
    if (typeof so !== 'object' || Array.isArray(so))
      throw badParam('structured_outputs', 'structured_outputs must be an object');
    const keys = Object.keys(so).filter(
      (k) =>
        k !== WHITESPACE &&
        (so as JsonObject)[k] !== undefined &&
        (so as JsonObject)[k] !== null &&
        (so as JsonObject)[k] !== false,
    );
    // disable_any_whitespace alone qualifies response_format or a forced tool call.
    if (keys.length > 1 || (keys.length === 0 && (so as JsonObject)[WHITESPACE] === undefined))
      throw badParam(
        'structured_outputs',
        'structured_outputs takes exactly one of json, regex, choice, grammar, json_object',
      );
    if (keys.length === 1) found.push(fromVllm(keys[0], (so as JsonObject)[keys[0]], `structured_outputs.${keys[0]}`));
  }
  for (const legacy of ['json', 'regex', 'choice', 'grammar'] as const) {
    const name = `guided_${legacy}`;
    if (body[name] !== undefined && body[name] !== null) found.push(fromVllm(legacy, body[name], name));
  }
  if (found.length > 1)
    throw badParam(
      found[1].param,
      `only one structured output constraint per request (${found.map((f) => f.param).join(', ')} were given)`,
    );
  return withRequestWhitespace(found[0], body);
}

function responseFormat(body: JsonObject): Constrained | undefined {
  const format = body.response_format;
  if (format === undefined || format === null) return undefined;
  if (typeof format !== 'object' || Array.isArray(format))
    throw badParam('response_format', 'response_format must be an object');
  const f = format as JsonObject;
  if (f.type === 'text') return undefined;
  if (f.type === 'json_object') return { spec: { type: 'json_object' }, param: 'response_format' };
  if (f.type === 'json_schema') {
    const js = f.json_schema as JsonObject | undefined;
    if (typeof js !== 'object' || js === null || Array.isArray(js))
      throw badParam(
        'response_format.json_schema',
        'response_format.json_schema must be an object with name and schema',
      );
    if (typeof js.name !== 'string')
      throw badParam('response_format.json_schema.name', 'response_format.json_schema.name must be a string');
    const schema = js.schema ?? {};
    if (typeof schema !== 'boolean' && (typeof schema !== 'object' || schema === null || Array.isArray(schema))) {
      throw badParam(
        'response_format.json_schema.schema',
        'response_format.json_schema.schema must be a JSON schema object',
      );
    }
    return {
      spec: { type: 'json_schema', schema: schema as JsonSchema, name: js.name },
      param: 'response_format.json_schema.schema',
    };
  }
  throw badParam(
    'response_format.type',
    `response_format.type must be text, json_object or json_schema, got ${JSON.stringify(f.type)}`,
  );
}

function fromVllm(kind: string, value: unknown, param: string): Constrained {
  let spec: ConstraintSpec;
  switch (kind) {
    case 'json': {
      const schema = typeof value === 'string' ? parseJson(value, param) : value;
      if (typeof schema !== 'boolean' && (typeof schema !== 'object' || schema === null || Array.isArray(schema)))
        throw badParam(param, `${param} must be a JSON schema (object or JSON text)`);
      spec = { type: 'json_schema', schema: schema as JsonSchema };
      break;
    }
    case 'json_object':
      spec = { type: 'json_object' };
      break;
    case 'regex':
      if (typeof value !== 'string') throw badParam(param, `${param} must be a string`);
      spec = { type: 'regex', pattern: value };
      break;
    case 'choice':
      if (!Array.isArray(value) || !value.every((v) => typeof v === 'string'))
        throw badParam(param, `${param} must be an array of strings`);
      spec = { type: 'choice', choices: value as string[] };
      break;
    case 'grammar':
      if (typeof value !== 'string') throw badParam(param, `${param} must be an EBNF grammar string`);
      spec = { type: 'grammar', ebnf: value };
      break;
    default:
      throw badParam(
        param,
        `${param} is not supported (use json, regex, choice, grammar or json_object)`,
        'unsupported_parameter',
      );
  }
  return { spec, param };
}

function parseJson(text: string, param: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    throw badParam(param, `${param} is not valid JSON`);
  }
}
