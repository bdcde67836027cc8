/**
 * A response as OpenAI's Responses API returns it (`object: "response"`), built from what the request
 * asked for and how its generation ended. The worker builds the in-progress one (for the stream's first
 * events), the object the finished one (which it stores); both through here, so they agree.
 */
import type { Constrained, JsonValue } from '../engine/constraints/spec.js';
import type { ChatMessage } from '../engine/request.js';
import type { InputItem, OutputItem } from './output-items.js';

/** What the worker hands the object for one response: the request, checked and in the engine's terms. */
export interface ResponseSpec {
  id: string;
  created_at: number;
  model: string;
  instructions: string | null;
  /** This response's input, as items (listed by GET /v1/responses/{id}/input_items) and as chat messages. */
  input: InputItem[];
  messages: ChatMessage[];
  /** Function definitions in chat completions' shape (what the template is handed); null without tools. */
  tools: JsonValue[] | null;
  /** Whether the output is read for `<tool_call>` blocks (not with tool_choice "none"). */
  parse_tools: boolean;
  /** The grammar of a forced call or of text.format's json_schema. */
  constraint: Constrained | undefined;
  temperature: number | null;
  top_p: number | null;
  max_output_tokens: number | null;
  store: boolean;
  previous_response_id: string | null;
  /** The conversation (its id) this response continues and is appended to, or null. */
  conversation: string | null;
  metadata: Record<string, string>;
  /** Passed to the chat template as extra variables (`enable_thinking: false`). */
  chat_template_kwargs: Record<string, JsonValue> | undefined;
  /** Echoed as the request gave them. */
  echo: {
    tools: JsonValue[];
    tool_choice: JsonValue;
    parallel_tool_calls: boolean;
    text: JsonValue;
    reasoning: JsonValue;
    user: string | null;
  };
}

export interface ResponseUsage {
  input_tokens: number;
  input_tokens_details: { cached_tokens: number };
  output_tokens: number;
  output_tokens_details: { reasoning_tokens: number };
  total_tokens: number;
}

export type ResponseStatus = 'in_progress' | 'completed' | 'incomplete';

export interface ResponseView {
  id: string;
  object: 'response';
  created_at: number;
  status: ResponseStatus;
  error: null;
  incomplete_details: { reason: 'max_output_tokens' } | null;
  instructions: string | null;
  max_output_tokens: number | null;
  model: string;
  output: OutputItem[];
  parallel_tool_calls: boolean;
  previous_response_id: string | null;
  conversation: { id: string } | null;
  reasoning: JsonValue;
  store: boolean;
  temperature: number;
  text: JsonValue;
  tool_choice: JsonValue;
  tools: JsonValue[];
  top_p: number;
  truncation: 'disabled';
  usage: ResponseUsage | null;
  user: string | null;
  metadata: Record<string, string>;
}

export interface FinishedGeneration {
  output: OutputItem[];
  /** The engine's finish: `length` makes the response incomplete (max_output_tokens). */
  finishReason: string;
  promptTokens: number;
  cachedTokens: number;
  completionTokens: number;
  reasoningTokens: number;
}

export function responseView(spec: ResponseSpec, finished?: FinishedGeneration): ResponseView {
  const incomplete = finished?.finishReason === 'length';
  return {
    id: spec.id,
    object: 'response',
    created_at: spec.created_at,
    status: !finished ? 'in_progress' : incomplete ? 'incomplete' : 'completed',
    error: null,
    incomplete_details: incomplete ? { reason: 'max_output_tokens' } : null,
    instructions: spec.instructions,
    max_output_tokens: spec.max_output_tokens,
    model: spec.model,
    output: finished?.output ?? [],
    parallel_tool_calls: spec.echo.parallel_tool_calls,
    previous_response_id: spec.previous_response_id,
    conversation: spec.conversation ? { id: spec.conversation } : null,
    reasoning: spec.echo.reasoning,
    store: spec.store,
    temperature: spec.temperature ?? 1,
    text: spec.echo.text,
    tool_choice: spec.echo.tool_choice,
    tools: spec.echo.tools,
    top_p: spec.top_p ?? 1,
    truncation: 'disabled',
    usage: finished
      ? {
          input_tokens: finished.promptTokens,
          input_tokens_details: { cached_tokens: finished.cachedTokens },
          output_tokens: finished.completionTokens,
          output_tokens_details: { reasoning_tokens: finished.reasoningTokens },
          total_tokens: finished.promptTokens + finished.completionTokens,
        }
      : null,
    user: spec.echo.user,
    metadata: spec.metadata,
  };
}
