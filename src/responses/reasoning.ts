/**
 * Reasoning ("thinking") text apart from the answer, as output processing: the model writes
 * `<think>…</think>` (or another pair its chat template names) before its answer, and the service hands
 * the part inside as `reasoning_content` (chat) or a reasoning item (responses). The markers are read from
 * the chat template, never from a list of model names; the engine is not involved.
 */

/** The pair of tags a template marks reasoning with, and whether the prompt already opened it. */
export interface ReasoningFormat {
  begin: string;
  end: string;
  /** The generation prompt ends inside the reasoning (DeepSeek-R1's template writes `<think>\n` itself). */
  startsInside: boolean;
}

/** A closing tag the template writes whose name says reasoning: `</think>`, `</thinking>`, `</reasoning>`. */
const CLOSING = /<\/([A-Za-z_]*(?:think|reason)[A-Za-z_]*)>/;

/** The reasoning tags a chat template uses (both the opening and the closing tag must appear), or undefined. */
export function reasoningTags(template: string | undefined): { begin: string; end: string } | undefined {
  if (!template) return undefined;
  const closing = CLOSING.exec(template);
  if (!closing) return undefined;
  const begin = `<${closing[1]}>`;
  return template.includes(begin) ? { begin, end: closing[0] } : undefined;
}

/** The format for one prompt: whether its rendered text (its tail is enough) leaves the model inside the tags. */
export function reasoningFormat(
  tags: { begin: string; end: string } | undefined,
  promptTail: string,
): ReasoningFormat | undefined {
  if (!tags) return undefined;
  const tail = promptTail.trimEnd();
  const opened = tail.lastIndexOf(tags.begin);
  const closed = tail.lastIndexOf(tags.end);
  return { ...tags, startsInside: opened >= 0 && opened > closed };
}

/** Length of the longest suffix of `text` that is a proper prefix of `marker`. */
function partialMarker(text: string, marker: string): number {
  for (let n = Math.min(marker.length - 1, text.length); n > 0; n--) if (marker.startsWith(text.slice(-n))) return n;
  return 0;
}

/**
 * Splits streamed text into reasoning and content. Reasoning is only what comes first: the text opens
 * with the begin tag (after whitespace) or the prompt opened it; everything after the end tag is content.
 * Text that may be the start of a tag is held back until it is known. Whitespace right after the end tag
 * (templates write `</think>\n\n`) is not content.
 */
export class ReasoningSplitter {
  private state: 'start' | 'inside' | 'after' | 'content';
  private held = '';
  /** Tokens seen while inside the reasoning, end tag included: `reasoning_tokens`. */
  reasoningTokens = 0;
  reasoning = '';

  constructor(private readonly format: ReasoningFormat | undefined) {
    this.state = !format ? 'content' : format.startsInside ? 'inside' : 'start';
  }

  /** Feeds one token's text; `counts` false for text that is not a token of its own. */
  push(text: string, counts = true): { reasoning: string; content: string } {
    const format = this.format;
    if (!format || this.state === 'content') return { reasoning: '', content: text };
    if (counts && (this.state === 'start' || this.state === 'inside')) this.reasoningTokens++;
    let buffer = this.held + text;
    this.held = '';
    let reasoning = '';
    let content = '';
    for (;;) {
      if (this.state === 'start') {
        const trimmed = buffer.trimStart();
        if (trimmed.length === 0) {
          this.held = buffer;
          break;
        }
        if (trimmed.startsWith(format.begin)) {
          buffer = trimmed.slice(format.begin.length);
          this.state = 'inside';
          continue;
        }
        if (format.begin.startsWith(trimmed)) {
          this.held = buffer;
          break;
        }
        // No reasoning: the answer starts at once. Nothing it counted was reasoning.
        this.reasoningTokens = 0;
        this.state = 'content';
        content += buffer;
        break;
      }
      if (this.state === 'inside') {
        const at = buffer.indexOf(format.end);
        if (at < 0) {
          const keep = partialMarker(buffer, format.end);
          reasoning += buffer.slice(0, buffer.length - keep);
          this.held = buffer.slice(buffer.length - keep);
          break;
        }
        reasoning += buffer.slice(0, at);
        buffer = buffer.slice(at + format.end.length);
        this.state = 'after';
        continue;
      }
      if (this.state === 'after') {
        const trimmed = buffer.trimStart();
        if (trimmed.length === 0) break; // blank lines after the end tag are dropped
        this.state = 'content';
        content += trimmed;
        break;
      }
      content += buffer;
      break;
    }
    this.reasoning += reasoning;
    return { reasoning, content };
  }

  /** The end of the text: held text goes where it was heading (an unclosed reasoning stays reasoning). */
  flush(): { reasoning: string; content: string } {
    const held = this.held;
    this.held = '';
    if (this.state === 'inside') {
      this.reasoning += held;
      return { reasoning: held, content: '' };
    }
    if (this.state === 'start') {
      this.reasoningTokens = 0;
      return { reasoning: '', content: held.trimStart() === '' ? '' : held };
    }
    return { reasoning: '', content: held };
  }
}

/** A whole completion split at once. */
export function splitReasoning(
  format: ReasoningFormat | undefined,
  text: string,
): { reasoning: string | undefined; content: string } {
  const splitter = new ReasoningSplitter(format);
  const a = splitter.push(text, false);
  const b = splitter.flush();
  const reasoning = a.reasoning + b.reasoning;
  const seen = format && (format.startsInside || text.trimStart().startsWith(format.begin));
  return { reasoning: seen ? reasoning : undefined, content: a.content + b.content };
}
