/**
 * JSON read under a nesting limit. JSON.parse itself takes deep input, but what reads the value next
 * (schema checks, the chat template, structured clone across RPC) recurses, and 100,000 levels of `[`
 * in `tools` or a session's defaults overflowed the stack there (a 500). Nothing legitimate nests past
 * a few levels, so the text is scanned first, in linear time, and refused past MAX_JSON_DEPTH.
 */
export const MAX_JSON_DEPTH = 64;

export class JsonDepthError extends Error {
  override readonly name = 'JsonDepthError';
}

/** Throws JsonDepthError when arrays and objects in `text` nest deeper than `max` (strings are skipped). */
export function checkJsonDepth(text: string, max = MAX_JSON_DEPTH): void {
  let depth = 0;
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (inString) {
      if (c === 0x5c)
        i++; // backslash: the next character is escaped
      else if (c === 0x22) inString = false;
    } else if (c === 0x22) inString = true;
    else if (c === 0x5b || c === 0x7b) {
      if (++depth > max) throw new JsonDepthError(`JSON nests deeper than ${max} levels (MAX_JSON_DEPTH)`);
    } else if (c === 0x5d || c === 0x7d) depth--;
  }
}

/** JSON.parse after the depth check; throws SyntaxError or JsonDepthError. */
export function readJsonText(text: string, max = MAX_JSON_DEPTH): unknown {
  checkJsonDepth(text, max);
  return JSON.parse(text);
}
