import type { Constrained, JsonValue } from '../engine/constraints/spec.js';
import { TOOL_CALL_SUFFIX, toolCallPrefix } from '../tokenizer/tool-format.js';
import type { JsonObject } from './body.js';
import { badParam } from './errors.js';

/** What a chat request's tools mean for the generation. */
export interface ToolUse {
  /** Function definitions for the chat template (OpenAI's shape, as HF templates take them). */
  tools: JsonValue[] | undefined;
  /** tool_choice `required` or a named function: the call is forced by grammar. */
  constraint: Constrained | undefined;
  /** Whether the output is parsed for tool calls (not for tool_choice `none`). */
  parse: boolean;
}

const NAME = /^[a-zA-Z0-9_-]{1,64}$/;

/**
 * `tools`, `tool_choice` (none | auto | required | {type: function, function: {name}}; default auto
 * with tools, as OpenAI) and `parallel_tool_calls` (default true: a forced generation may make several
 * calls, one per block).
 */
export function toolUse(body: JsonObject): ToolUse {
  const raw = body.tools;
  const choice = body.tool_choice ?? undefined;
  if (raw === undefined || raw === null) {
    if (choice !== undefined && choice !== 'none')
      throw badParam('tool_choice', 'tool_choice needs tools', 'invalid_value');
    return { tools: undefined, constraint: undefined, parse: false };
  }
  if (!Array.isArray(raw) || raw.length === 0)
    throw badParam('tools', 'tools must be a non-empty array of function definitions');
  const functions = raw.map((tool: unknown, i) => {
    const t = tool as { type?: unknown; function?: { name?: unknown; parameters?: unknown } } | null;
    if (typeof t !== 'object' || t === null || t.type !== 'function')
      throw badParam(`tools[${i}].type`, `tools[${i}] must be {"type": "function", "function": {...}}`);
    const fn = t.function;
    if (typeof fn !== 'object' || fn === null || typeof fn.name !== 'string' || !NAME.test(fn.name)) {
      throw badParam(`tools[${i}].function.name`, `tools[${i}].function.name must be 1-64 letters, digits, _ or -`);
    }
    const parameters = fn.parameters ?? { type: 'object', properties: {} };
    if (typeof parameters !== 'object' || parameters === null || Array.isArray(parameters))
      throw badParam(`tools[${i}].function.parameters`, `tools[${i}].function.parameters must be a JSON schema object`);
    return { name: fn.name, parameters: parameters as { [key: string]: JsonValue } };
  });
  const parallel = body.parallel_tool_calls ?? true;
  if (typeof parallel !== 'boolean') throw badParam('parallel_tool_calls', 'parallel_tool_calls must be a boolean');

  let forced: typeof functions | undefined;
  if (choice === undefined || choice === 'auto') forced = undefined;
  // "none": the functions are left out of the prompt (vLLM's exclude_tools_when_tool_choice_none), so the
  // model is not invited to write call markup that would then reach the client as text.
  else if (choice === 'none') return { tools: undefined, constraint: undefined, parse: false };
  else if (choice === 'required') forced = functions;
  else if (typeof choice === 'object' && (choice as JsonObject).type === 'function') {
    const name = ((choice as JsonObject).function as JsonObject | undefined)?.name;
    const fn = functions.find((f) => f.name === name);
    if (!fn)
      throw badParam(
        'tool_choice.function.name',
        `tool_choice names ${JSON.stringify(name)}, which is not among the tools`,
        'invalid_value',
      );
    forced = [fn];
  } else
    throw badParam(
      'tool_choice',
      'tool_choice must be "none", "auto", "required" or {"type": "function", "function": {"name": ...}}',
      'invalid_value',
    );

  const constraint: Constrained | undefined = forced && {
    spec: {
      type: 'tool_calls',
      parallel: parallel && choice === 'required',
      tags: forced.map((f) => ({ begin: toolCallPrefix(f.name), schema: f.parameters, end: TOOL_CALL_SUFFIX })),
    },
    param: 'tools',
  };
  return { tools: raw as JsonValue[], constraint, parse: true };
}
