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
const callId = (): string =>
  `call_${[...crypto.getRandomValues(new Uint8Array(12))].map((b) => b.toString(16).padStart(2, '0')).join('')}`;

/** Length of the longest suffix of `text` that is a proper prefix of `marker` (text that may yet become it). */
function partialMarker(text: string, marker: string): number {
  for (let n = Math.min(marker.length - 1, text.length); n > 0; n--) if (marker.startsWith(text.slice(-n))) return n;
  return 0;
}

/**
 * A call's header is read only from this many characters after `<tool_call>` (names are at most 64):
 * past them the block is not a call. It bounds the header regex, which reads from the block's start.
 */
const HEADER_LIMIT = 1024;

const isSpace = (c: string): boolean => /\s/.test(c);

/**
 * Splits a completion's text, as it streams, into content and tool calls written in the model's format
 * (src/tokenizer/tool-format.ts: `<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>`). Text that
 * may be the start of a marker is held back until it is known; a call's arguments stream as they come,
 * less what may be the call's closing brace. A block that does not read as a call is given back as content.
 *
 * Each push reads only the text it brings (and a marker's length before it): a block is one growing
 * buffer, and re-reading it on every token made a long stream quadratic, which guided_regex can force
 * with a run of whitespace.
 */
export class ToolCallParser {
  readonly calls: ToolCall[] = [];
  /** Characters read so far, by every scan together: what the tests hold to the length of the text. */
  examined = 0;
  private buffer = '';
  private inside = false;
  /** Inside a block: where the search for its end marker resumes. */
  private searched = 0;
  /** Whether the header may yet be read (false once it is, or once the block is too long to hold one). */
  private headerOpen = true;
  private current: OpenCall | undefined;

  push(text: string): { content: string; deltas: ToolCallDelta[] } {
    const before = this.buffer.length;
    this.buffer += text;
    let content = '';
    const deltas: ToolCallDelta[] = [];
    for (let fresh = before; ; fresh = 0) {
      if (!this.inside) {
        const from = Math.max(0, fresh - TOOL_CALL_BEGIN.length + 1);
        this.examined += this.buffer.length - from;
        const at = this.buffer.indexOf(TOOL_CALL_BEGIN, from);
        if (at < 0) {
          const keep = partialMarker(this.buffer, TOOL_CALL_BEGIN);
          content += this.buffer.slice(0, this.buffer.length - keep);
          this.buffer = this.buffer.slice(this.buffer.length - keep);
          break;
        }
        content += this.buffer.slice(0, at);
        this.buffer = this.buffer.slice(at + TOOL_CALL_BEGIN.length);
        this.inside = true;
        this.searched = 0;
        this.headerOpen = true;
        continue;
      }
      // Only new text that is not blank can complete a header (it ends where the arguments' first character is).
      if (this.headerOpen) {
        this.examined += this.buffer.length - fresh;
        if (/\S/.test(this.buffer.slice(fresh))) this.readHeader(deltas);
      }
      const from = Math.max(0, this.searched - TOOL_CALL_END.length + 1);
      this.examined += this.buffer.length - from;
      const end = this.buffer.indexOf(TOOL_CALL_END, from);
      this.searched = this.buffer.length;
      if (this.current) {
        // Unfinished: hold back what may be the end marker, the call's `}` and the whitespace around it.
        const stable =
          end >= 0
            ? end
            : this.buffer.length -
              Math.min(partialMarker(this.buffer, TOOL_CALL_END), this.buffer.length - this.current.argsStart);
        this.examined += Math.max(0, stable - this.current.readTo);
        const fragment = this.current.advance(this.buffer, stable);
        if (fragment) {
          deltas.push({ index: this.current.index, function: { arguments: fragment } });
          this.calls[this.current.index].function.arguments += fragment;
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

  /**
   * The end of the text: what is held back outside a block is content. An unfinished block (cut by
   * max_tokens) is never content: a call keeps what it streamed, and a block cut before its header is dropped,
   * so no half `<tool_call` markup reaches the client.
   */
  flush(): string {
    const rest = this.inside ? '' : this.buffer;
    this.buffer = '';
    return rest;
  }

  private readHeader(deltas: ToolCallDelta[]): void {
    const head = this.buffer.slice(0, HEADER_LIMIT);
    this.examined += head.length;
    const header = HEADER.exec(head);
    if (!header) {
      this.headerOpen = this.buffer.length < HEADER_LIMIT;
      return;
    }
    this.headerOpen = false;
    const name = JSON.parse(header[1]) as string;
    const index = this.calls.length;
    this.calls.push({ id: callId(), type: 'function', function: { name, arguments: '' } });
    this.current = new OpenCall(index, header[0].length);
    deltas.push({ index, id: this.calls[index].id, type: 'function', function: { name, arguments: '' } });
  }
}

/**
 * A call whose arguments are streaming: what went out, and where the last two characters that are not
 * whitespace sit, so the tail /\s*\}?\s*$/ (what may close the call) is known without reading it again. Only the text between
 * the last read and `stable` (what can no longer turn out to be the end marker) is read.
 */
class OpenCall {
  /** Where in the block its arguments start, and how far they went out. */
  private sentTo: number;
  /** How far the arguments have been read. */
  readTo: number;
  /** Just past the last character that is not whitespace, and past the one before it. */
  private lastSolid: number;
  private solidBefore: number;

  constructor(
    readonly index: number,
    readonly argsStart: number,
  ) {
    this.sentTo = this.readTo = this.lastSolid = this.solidBefore = argsStart;
  }

  /** The arguments' text that is now safe to send: up to `stable`, less a closing `}` and whitespace. */
  advance(block: string, stable: number): string {
    for (let i = this.readTo; i < stable; i++) {
      if (isSpace(block[i])) continue;
      this.solidBefore = this.lastSolid;
      this.lastSolid = i + 1;
    }
    this.readTo = Math.max(this.readTo, stable);
    const safe =
      block[this.lastSolid - 1] === '}' && this.lastSolid > this.argsStart ? this.solidBefore : this.lastSolid;
    if (safe <= this.sentTo) return '';
    const fragment = block.slice(this.sentTo, safe);
    this.sentTo = safe;
    return fragment;
  }
}

/** Parses a whole completion: its content (trimmed of the blank lines around calls) and its tool calls. */
export function parseToolCalls(text: string): { content: string; calls: ToolCall[] } {
  const parser = new ToolCallParser();
  const content = parser.push(text).content + parser.flush();
  return { content: parser.calls.length > 0 ? content.trim() : content, calls: parser.calls };
}
