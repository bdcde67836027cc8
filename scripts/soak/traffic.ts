// One soak client: a loop of streamed chats, plain completions and session turns, some cut off at a
// random moment, counting what it saw. Connection failures while the server restarts are counted apart.
import { request } from 'node:http';

export interface Counts {
  requests: number;
  ok: number;
  cuts: number;
  status4xx: number;
  /** 409 session_busy: a turn sent right after cutting the previous one, which the server is still cancelling. */
  busy: number;
  status5xx: number;
  /** 5xx answers while the server was not being restarted: the ones that matter. */
  status5xxSteady: number;
  refused: number;
  /** Streams that began with 200 and ended with an error event instead of [DONE] (e.g. a shard restarted). */
  streamErrors: number;
  sessionsCreated: number;
  turnsCompleted: number;
}

export const emptyCounts = (): Counts => ({
  requests: 0,
  ok: 0,
  cuts: 0,
  status4xx: 0,
  busy: 0,
  status5xx: 0,
  status5xxSteady: 0,
  refused: 0,
  streamErrors: 0,
  sessionsCreated: 0,
  turnsCompleted: 0,
});

export interface Session {
  id: string;
  /** Turns answered in full: the stored transcript must hold at least 2 messages for each. */
  turns: number;
}

export interface Context {
  url: string;
  counts: Counts;
  sessions: Session[];
  restarting(): boolean;
  /** Stops the loops: the time or request budget is spent. */
  done(): boolean;
  random(): number;
}

interface Outcome {
  status: number;
  body: string;
  cut: boolean;
}

/** One POST over a raw socket (so a cut is a real disconnect); `cutAfterMs` destroys it mid-answer. */
function post(url: string, path: string, body: unknown, cutAfterMs?: number): Promise<Outcome> {
  return new Promise((resolve, reject) => {
    const req = request(`${url}${path}`, { method: 'POST', headers: { 'content-type': 'application/json' } }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (d: string) => (text += d));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body: text, cut: false }));
      res.on('error', () => resolve({ status: res.statusCode ?? 0, body: text, cut: true }));
      if (cutAfterMs !== undefined) {
        setTimeout(() => {
          if (res.complete) return;
          req.destroy();
          resolve({ status: res.statusCode ?? 0, body: text, cut: true });
        }, cutAfterMs);
      }
    });
    req.setTimeout(60_000, () => req.destroy(new Error('timed out')));
    req.on('error', reject);
    req.end(JSON.stringify(body));
  });
}

function record(ctx: Context, outcome: Outcome): void {
  ctx.counts.requests++;
  if (outcome.cut) ctx.counts.cuts++;
  if (outcome.status >= 500) {
    ctx.counts.status5xx++;
    if (!ctx.restarting()) {
      ctx.counts.status5xxSteady++;
      console.error(`soak: ${outcome.status} outside the restart: ${outcome.body.slice(0, 200)}`);
    }
  } else if (outcome.status === 409 && outcome.body.includes('session_busy')) {
    ctx.counts.busy++;
  } else if (outcome.status >= 400) {
    ctx.counts.status4xx++;
    if (outcome.status !== 429) console.error(`soak: unexpected ${outcome.status}: ${outcome.body.slice(0, 200)}`);
  } else if (!outcome.cut) {
    if (streamFailed(outcome)) ctx.counts.streamErrors++;
    else ctx.counts.ok++;
  }
}

/** A streamed answer that ended with an error event rather than [DONE]. */
const streamFailed = (o: Outcome): boolean => o.body.startsWith('data: ') && !o.body.trimEnd().endsWith('data: [DONE]');

async function step(ctx: Context, own: Session | undefined): Promise<Session | undefined> {
  const r = ctx.random();
  const cut = ctx.random() < 0.3 ? Math.floor(ctx.random() * 400) : undefined;
  const maxTokens = 8 + Math.floor(ctx.random() * 56);
  if (r < 0.4) {
    const body = {
      messages: [{ role: 'user', content: `soak ${Math.floor(ctx.random() * 1e6)}` }],
      max_tokens: maxTokens,
      ignore_eos: true,
      stream: true,
      n: ctx.random() < 0.2 ? 2 : 1,
    };
    record(ctx, await post(ctx.url, '/v1/chat/completions', body, cut));
    return own;
  }
  if (r < 0.55) {
    record(ctx, await post(ctx.url, '/v1/completions', { prompt: 'The soak test says', max_tokens: maxTokens }, cut));
    return own;
  }
  if (!own) {
    const outcome = await post(ctx.url, '/v1/sessions', {
      system: `Soak session ${ctx.counts.sessionsCreated % 4}.`,
      defaults: { max_tokens: 12 },
    });
    record(ctx, outcome);
    if (outcome.status !== 201) return undefined;
    const session = { id: (JSON.parse(outcome.body) as { id: string }).id, turns: 0 };
    ctx.counts.sessionsCreated++;
    ctx.sessions.push(session);
    return session;
  }
  const outcome = await post(
    ctx.url,
    `/v1/sessions/${own.id}/messages`,
    { content: `turn ${own.turns + 1}`, stream: ctx.random() < 0.5 },
    cut,
  );
  record(ctx, outcome);
  if (outcome.status === 200 && !outcome.cut && !streamFailed(outcome)) {
    own.turns++;
    ctx.counts.turnsCompleted++;
  }
  // A session lives for a few turns, then the client starts another (the old one stays stored).
  return own.turns >= 6 ? undefined : own;
}

/** One client's loop until the budget is spent. */
export async function client(ctx: Context): Promise<void> {
  let own: Session | undefined;
  while (!ctx.done()) {
    try {
      own = await step(ctx, own);
    } catch {
      // No connection (the server is restarting): wait a little and go on.
      ctx.counts.refused++;
      await new Promise((resolve) => setTimeout(resolve, 200));
    }
  }
}
