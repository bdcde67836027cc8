import { ApiError } from './errors.js';

/**
 * How events are framed: chat and completions send bare `data:` lines and end with `data: [DONE]`; the
 * Responses API names each event (`event: response.output_text.delta`) after its `type` and sends no [DONE].
 */
export interface SseFraming {
  named: boolean;
  done: boolean;
}
const CHAT_FRAMING: SseFraming = { named: false, done: true };
export const RESPONSES_FRAMING: SseFraming = { named: true, done: false };

/**
 * Server-sent events in OpenAI's framing: `data: {json}\n\n` per chunk, then `data: [DONE]\n\n`. A
 * failure after the stream began cannot change the status any more, so it is sent as an error object
 * (`data: {"error":{...}}`) and the stream ends without [DONE].
 * Pull-based: a chunk is produced only when the client is ready for it, and a client that goes away
 * cancels the stream, which returns the chunk iterator (and so cancels the generation behind it).
 */
export function sseResponse(chunks: AsyncIterable<unknown>, onCancel?: () => void, framing = CHAT_FRAMING): Response {
  const encoder = new TextEncoder();
  const frame = (value: unknown): string => {
    const name = framing.named ? (value as { type?: unknown }).type : undefined;
    return `${typeof name === 'string' ? `event: ${name}\n` : ''}data: ${JSON.stringify(value)}\n\n`;
  };
  const iterator = chunks[Symbol.asyncIterator]();
  let finished = false;
  const body = new ReadableStream<Uint8Array>({
    async pull(controller) {
      if (finished) return;
      try {
        const { done, value } = await iterator.next();
        if (finished) return; // cancelled while waiting
        if (done) {
          finished = true;
          if (framing.done) controller.enqueue(encoder.encode('data: [DONE]\n\n'));
          controller.close();
        } else {
          controller.enqueue(encoder.encode(frame(value)));
        }
      } catch (err) {
        if (finished) return;
        finished = true;
        // An ApiError (e.g. the session was deleted meanwhile) says what happened; anything else is a bug.
        if (!(err instanceof ApiError)) console.error('stream failed', err);
        const body =
          err instanceof ApiError
            ? err.body
            : new ApiError(500, 'the generation failed', 'server_error', null, 'internal_error').body;
        controller.enqueue(
          encoder.encode(framing.named ? frame({ ...body.error, type: 'error' }) : `data: ${JSON.stringify(body)}\n\n`),
        );
        controller.close();
      }
    },
    async cancel() {
      finished = true;
      onCancel?.();
      await iterator.return?.();
    },
  });
  return new Response(body, {
    headers: {
      'content-type': 'text/event-stream; charset=utf-8',
      'cache-control': 'no-cache',
      'x-accel-buffering': 'no',
    },
  });
}
