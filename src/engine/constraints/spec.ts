/**
 * JSON as it arrives, typed shallowly: Durable Object stubs type only serialisable values, and a
 * recursive JSON type is too deep for their type mapping.
 */
export type JsonValue = string | number | boolean | null | object;
export type JsonSchema = { [key: string]: JsonValue } | boolean;

/**
 * What a request's output must match, after the service has mapped the API's fields (OpenAI's
 * response_format, vLLM's structured_outputs, tools) onto it. Each kind compiles to one grammar; the
 * compiled grammar is cached by `constraintKey` (the tokenizer is the engine's own, so the key is per
 * (spec, tokenizer)).
 */
/**
 * Whitespace in JSON: by default none is free (a small model given free whitespace can spend every token
 * on it, as llama.cpp found): one space after `,` and `:` in JSON outputs, none in tool-call arguments
 * (compact JSON, as OpenAI's). `anyWhitespace` (vLLM's `disable_any_whitespace: false`) frees it again.
 */
export type ConstraintSpec =
  /** Any JSON object (OpenAI's `json_object`). */
  | { type: 'json_object'; anyWhitespace?: boolean }
  /** JSON valid against `schema` (OpenAI's `json_schema`; vLLM's `json`). */
  | { type: 'json_schema'; schema: JsonSchema; name?: string; anyWhitespace?: boolean }
  /** Text matching the regular expression in full (vLLM's `regex`). */
  | { type: 'regex'; pattern: string }
  /** Exactly one of these strings (vLLM's `choice`). */
  | { type: 'choice'; choices: string[] }
  /** Text derived from the `root` rule of this EBNF grammar (vLLM's `grammar`; xgrammar's dialect). */
  | { type: 'grammar'; ebnf: string }
  /** A tool call (or several) in the model's format, forced (tool_choice `required` or a named function). */
  | { type: 'tool_calls'; tags: ToolCallTag[]; parallel: boolean; anyWhitespace?: boolean };

/** One callable function as a tool call's begin marker, arguments schema and end marker. */
export interface ToolCallTag {
  begin: string;
  /** The JSON the call carries between begin and end (its `arguments`, or `{name, arguments}`). */
  schema: JsonSchema;
  end: string;
}

/** The API parameter a constraint came from, for error messages (`response_format`, `structured_outputs.regex`, ...). */
export interface Constrained {
  spec: ConstraintSpec;
  param: string;
  /**
   * The markers of a reasoning span the model may write before its answer (`<think>`, `</think>`): the
   * grammar then holds from the span's end, not from the first token (reasoning-gate.ts).
   */
  reasoning?: { begin: string; end: string };
}

export function constraintKey(spec: ConstraintSpec): string {
  return JSON.stringify(spec);
}
