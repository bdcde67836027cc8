/**
 * Finishing a refused request body. In `wrangler dev` an answer that leaves before its request body has
 * fully arrived breaks the proxy's pooled connection, and the next request on it, from anyone, gets a 503
 * (docs/platform.md; measured for cancelling the body, releasing it, and reading it on after answering). So a
 * refused body is read to its end and thrown away before the 413 goes. A client that stops sending (a
 * Content-Length it never fulfils) would hold that answer for ever: after STALL_MS without a byte, or
 * TOTAL_MS in all, the body is cancelled and the 413 goes anyway; such a client is still sending nothing, so
 * its proxy connection is busy and not reused, which measured harmless.
 */

/** Waiting this long for the next chunk means the client is not sending. */
export const STALL_MS = 1000;
/** A slow drip of bytes cannot hold the answer longer than this. */
export const TOTAL_MS = 10_000;

export async function discardBody(
  reader: ReadableStreamDefaultReader<Uint8Array>,
  stallMs = STALL_MS,
  totalMs = TOTAL_MS,
): Promise<void> {
  const deadline = Date.now() + totalMs;
  try {
    for (;;) {
      const wait = Math.min(stallMs, deadline - Date.now());
      if (wait <= 0) break;
      let timer: ReturnType<typeof setTimeout> | undefined;
      const stalled = new Promise<'stalled'>((resolve) => (timer = setTimeout(() => resolve('stalled'), wait)));
      const next = await Promise.race([reader.read(), stalled]).finally(() => clearTimeout(timer));
      if (next === 'stalled') break;
      if (next.done) return;
    }
    await reader.cancel();
  } catch {
    // The client left mid-body: nothing is left to finish.
  }
}
