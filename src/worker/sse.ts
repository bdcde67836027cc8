import { ApiError } from './errors.js';

/**
 * Server-sent events in OpenAI's framing: `data: {json}\n\n` per chunk, then `data: [DONE]\n\n`. A
 * failure after the stream began cannot change the status any more, so it is sent as an error object
 * (`data: {"error":{...}}`) and the stream ends without [DONE].
 * Pull-based: a chunk is produced only when the client is ready for it, and a client that goes away
 * cancels the stream, which returns the chunk iterator (and so cancels the generation behind it).
 */
export function sseResponse(chunks: AsyncIterable<unknown>, onCancel?: () => void): Response {
  const encoder = new TextEncoder();
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
          controller.enqueue(encoder.encode('data: [DONE]\n\n'));
          controller.close();
        } else {
          controller.enqueue(encoder.encode(`data: ${JSON.stringify(value)}\n\n`));
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
        controller.enqueue(encoder.encode(`data: ${JSON.stringify(body)}\n\n`));
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
