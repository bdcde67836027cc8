import { TOOL_CALL_BEGIN, TOOL_CALL_END } from '../tokenizer/tool-format.js';

/** A finished tool call, as OpenAI's message.tool_calls carries it. */
export interface ToolCall {
  id: string;
  type: 'function';
  function: { name: string; arguments: string };
}

/** A streamed piece of a tool call: the first carries id, type and name; the rest, fragments of arguments. */
export interface ToolCallDelta {
  index: number;
  id?: string;
  type?: 'function';
  function: { name?: string; arguments: string };
}

/** `{"name": "...", "arguments": ` at the start of a call block, once the arguments have begun (so the whitespace before them is known). */
const HEADER = /^\s*\{\s*"name"\s*:\s*("(?:[^"\\]|\\.)*")\s*,\s*"arguments"\s*:\s*(?=\S)/;
/**
 * `text` without what may close the arguments: whitespace, the call object's `}`, whitespace (what
 * /\s*\}?\s*$/ matched). Scanned from the end, in time linear in what it strips: that regex, tried at
 * every start position, went cubic on a long run of whitespace, which guided_regex can force, and it
 * runs again on every streamed token.
 */
export function withoutTail(text: string): string {
  const space = (i: number): boolean => i >= 0 && /\s/.test(text[i]);
  let end = text.length;
  while (space(end - 1)) end--;
  if (text[end - 1] === '}') end--;
  while (space(end - 1)) end--;
  return text.slice(0, end);
}

const callId = (): string =>
  `call_${[...crypto.getRandomValues(new Uint8Array(12))].map((b) => b.toString(16).padStart(2, '0')).join('')}`;

/** Length of the longest suffix of `text` that is a proper prefix of `marker` (text that may yet become it). */
function partialMarker(text: string, marker: string): number {
  for (let n = Math.min(marker.length - 1, text.length); n > 0; n--) if (marker.startsWith(text.slice(-n))) return n;
  return 0;
}

/**
 * Splits a completion's text, as it streams, into content and tool calls written in the model's format
 * (src/tokenizer/tool-format.ts: `<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>`). Text that
 * may be the start of a marker is held back until it is known; a call's arguments stream as they come,
 * less what may be the call's closing brace. A block that does not read as a call is given back as content.
 */
export class ToolCallParser {
  readonly calls: ToolCall[] = [];
  private buffer = '';
  private inside = false;
  /** The current call, once its header has been read: its index, where its arguments start in `buffer`, and how much of them went out. */
  private current: { index: number; argsStart: number; sent: number } | undefined;

  push(text: string): { content: string; deltas: ToolCallDelta[] } {
    this.buffer += text;
    let content = '';
    const deltas: ToolCallDelta[] = [];
    for (;;) {
      if (!this.inside) {
        const at = this.buffer.indexOf(TOOL_CALL_BEGIN);
        if (at < 0) {
          const keep = partialMarker(this.buffer, TOOL_CALL_BEGIN);
          content += this.buffer.slice(0, this.buffer.length - keep);
          this.buffer = this.buffer.slice(this.buffer.length - keep);
          break;
        }
        content += this.buffer.slice(0, at);
        this.buffer = this.buffer.slice(at + TOOL_CALL_BEGIN.length);
        this.inside = true;
        continue;
      }
      if (!this.current) {
        const header = HEADER.exec(this.buffer);
        if (header) {
          const name = JSON.parse(header[1]) as string;
          const index = this.calls.length;
          this.calls.push({ id: callId(), type: 'function', function: { name, arguments: '' } });
          this.current = { index, argsStart: header[0].length, sent: 0 };
          deltas.push({ index, id: this.calls[index].id, type: 'function', function: { name, arguments: '' } });
        }
      }
      const end = this.buffer.indexOf(TOOL_CALL_END);
      if (this.current) {
        const { index, argsStart } = this.current;
        const body = this.buffer.slice(argsStart, end < 0 ? this.buffer.length : end);
        // Unfinished: hold back what may be the end marker, the call's `}` and the whitespace around it.
        const safe =
          end < 0 ? withoutTail(body.slice(0, body.length - partialMarker(body, TOOL_CALL_END))) : withoutTail(body);
        if (safe.length > this.current.sent) {
          const fragment = safe.slice(this.current.sent);
          deltas.push({ index, function: { arguments: fragment } });
          this.calls[index].function.arguments += fragment;
          this.current.sent = safe.length;
        }
      }
      if (end < 0) break;
      if (!this.current) content += `${TOOL_CALL_BEGIN}${this.buffer.slice(0, end)}${TOOL_CALL_END}`; // not a call after all
      this.buffer = this.buffer.slice(end + TOOL_CALL_END.length);
      this.inside = false;
      this.current = undefined;
    }
    return { content, deltas };
  }

  /** The end of the text: whatever is still held back is content (an unfinished call keeps what it streamed). */
  flush(): string {
    const rest = this.inside && !this.current ? `${TOOL_CALL_BEGIN}${this.buffer}` : this.inside ? '' : this.buffer;
    this.buffer = '';
    return rest;
  }
}

/** Parses a whole completion: its content (trimmed of the blank lines around calls) and its tool calls. */
export function parseToolCalls(text: string): { content: string; calls: ToolCall[] } {
  const parser = new ToolCallParser();
  const content = parser.push(text).content + parser.flush();
  return { content: parser.calls.length > 0 ? content.trim() : content, calls: parser.calls };
}
