import { InvalidRequestError } from '../../errors.js';
import { RunnerUnavailableError } from '../runner-unavailable.js';
import { HOST_AUTH_HEADER, type HostError } from './host-protocol.js';

/**
 * The GPU host cannot be reached (refused, reset, timed out, or it answered 5xx): the requests whose pass it
 * was end with a 503 that says so and when to try again; the engine and everything else go on.
 */
export class HostUnavailableError extends RunnerUnavailableError {
  override readonly name = 'HostUnavailableError';

  constructor(message: string, options?: { cause?: unknown }) {
    super(message, 'gpu_host_unavailable', options);
  }
}

/** How a RemoteRunner reaches its host: one POST of one frame, answered by one frame. Tests may pass their own. */
export interface HostLink {
  /** Where the host is, for messages (never its secret). */
  readonly where: string;
  post(path: string, frame: Uint8Array<ArrayBuffer>): Promise<Uint8Array>;
}

/** How long one call may take before the host counts as unreachable: a hung host must not hold the engine loop. */
export const HOST_CALL_TIMEOUT_MS = 60_000;

/**
 * The link over HTTP(S) with fetch (workerd, Node, browsers): the secret in `authorization: Bearer`, a deadline
 * per call. The host's refusals (wrong secret, another model, a protocol mismatch) are InvalidRequestError, which
 * the object reports as a 503 naming them; a host that cannot be reached is HostUnavailableError.
 */
export function httpHostLink(url: string, secret: string, timeoutMs = HOST_CALL_TIMEOUT_MS): HostLink {
  const base = url.replace(/\/+$/, '');
  const where = (() => {
    try {
      return new URL(base).host;
    } catch {
      return base;
    }
  })();
  return {
    where,
    async post(path, frame) {
      const send = () =>
        fetch(`${base}${path}`, {
          method: 'POST',
          headers: { [HOST_AUTH_HEADER]: `Bearer ${secret}`, 'content-type': 'application/octet-stream' },
          body: frame,
          signal: AbortSignal.timeout(timeoutMs),
        });
      let res: Response;
      try {
        // Once more on a fresh connection: a kept-alive socket the host closed (it restarted) fails the first
        // try. Every call may be repeated: a pass writes the same bytes at the same positions again.
        res = await send().catch((err: unknown) => {
          if (err instanceof Error && err.name === 'TimeoutError') throw err;
          return send();
        });
      } catch (err) {
        throw new HostUnavailableError(
          `the GPU host at ${where} cannot be reached: ${err instanceof Error ? err.message : String(err)}`,
          { cause: err },
        );
      }
      if (res.ok) return new Uint8Array(await res.arrayBuffer());
      const text = await res.text().catch(() => '');
      let message = text.slice(0, 500);
      try {
        message = (JSON.parse(text) as HostError).error.message;
      } catch {}
      if (res.status >= 500)
        throw new HostUnavailableError(`the GPU host at ${where} failed (${res.status}): ${message}`);
      throw new InvalidRequestError(
        'GPU_HOST_URL',
        `the GPU host at ${where} refused (${res.status}): ${message}`,
        res.status === 401 ? 'gpu_host_unauthorized' : 'gpu_host_refused',
      );
    },
  };
}
