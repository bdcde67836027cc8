// `npm run soak`: N concurrent clients for M minutes against `npm start` on loopback, with random cuts,
// session turns and one server restart in the middle; then checks that no session was lost and nothing
// leaked (KV blocks, running or queued requests), and prints a summary. Not part of `npm test`.
//   npm run soak -- [--clients 8] [--minutes 2] [--max-requests 20000]
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { freePort } from './lib/free-port.js';
import { mulberry32 } from './lib/mulberry32.js';
import { startDevServer, type DevServer } from './lib/dev-server.js';
import { client, emptyCounts, type Context, type Session } from './soak/traffic.js';
import { answerHelp } from './lib/help.js';

answerHelp(`Usage: npm run soak -- [--clients 8] [--minutes 2] [--max-requests 20000] [--seed 14] [--verbose]
N concurrent clients for M minutes against npm start on loopback, with random cuts, session turns and one
server restart; then checks that no session was lost and nothing leaked, and prints a summary.`);
const { values } = parseArgs({
  options: {
    clients: { type: 'string', default: '8' },
    minutes: { type: 'string', default: '2' },
    'max-requests': { type: 'string', default: '20000' },
    seed: { type: 'string', default: '14' },
    verbose: { type: 'boolean', default: false },
  },
});
const bounded = (name: string, raw: string, max: number): number => {
  const v = Number(raw);
  if (!Number.isFinite(v) || v <= 0 || v > max) throw new Error(`--${name} must be in (0, ${max}], got ${raw}`);
  return v;
};
const clients = Math.floor(bounded('clients', values.clients, 64));
const minutes = bounded('minutes', values.minutes, 60);
const maxRequests = Math.floor(bounded('max-requests', values['max-requests'], 1_000_000));
const seed = Math.floor(Number(values.seed)) >>> 0 || 14;

/** A seeded generator, so a run's choices can be replayed. */
const random = mulberry32(seed);

const logLines: string[] = [];
const serverLog = (line: string): void => {
  logLines.push(line);
  if (values.verbose) console.log(`  [server] ${line}`);
};

async function metric(url: string, name: string): Promise<number> {
  const text = await (await fetch(`${url}/metrics`)).text();
  let sum = 0;
  for (const line of text.split('\n')) {
    const m = /^([a-z_]+)(\{[^}]*\})? ([-0-9.e+]+)$/.exec(line);
    if (m && m[1] === name) sum += Number(m[3]);
  }
  return sum;
}

/** Sessions whose stored transcript is gone or shorter than the turns answered in full. */
async function lostSessions(url: string, sessions: Session[]): Promise<string[]> {
  const lost: string[] = [];
  for (const s of sessions) {
    const res = await fetch(`${url}/v1/sessions/${s.id}`);
    const body = (await res.json()) as { messages?: unknown[] };
    if (res.status !== 200 || (body.messages?.length ?? 0) < 2 * s.turns)
      lost.push(`${s.id} (${res.status}, ${body.messages?.length ?? 0} messages for ${s.turns} turns)`);
  }
  return lost;
}

async function main(): Promise<void> {
  const port = await freePort();
  const persist = mkdtempSync(join(tmpdir(), 'edge-infer-soak-'));
  const durationMs = minutes * 60_000;
  console.log(
    `soak: ${clients} clients for ${minutes} min (at most ${maxRequests} requests) against npm start on 127.0.0.1:${port}, seed ${values.seed}`,
  );
  // `npm start` as a user runs it, on a port of its own, storage kept across the restart.
  const start = () => startDevServer({}, persist, { via: 'npm-start', port, onLine: serverLog, readyWithinMs: 90_000 });
  let server: DevServer = await start();
  const counts = emptyCounts();
  const sessions: Session[] = [];
  let restarting = false;
  const started = Date.now();
  const ctx: Context = {
    url: server.url,
    counts,
    sessions,
    restarting: () => restarting,
    done: () => Date.now() - started > durationMs || counts.requests >= maxRequests,
    random,
  };

  // The restart: halfway through, stop the server under load and start it again on the same storage.
  const restart = (async () => {
    await new Promise((resolve) => setTimeout(resolve, durationMs / 2));
    if (ctx.done()) return;
    restarting = true;
    console.log(`soak: restarting the server at ${((Date.now() - started) / 1000).toFixed(0)} s`);
    await server.stop();
    server = await start();
    // Streams cut by the restart still answer for a moment; the window closes a little after it is up.
    await new Promise((resolve) => setTimeout(resolve, 2000));
    restarting = false;
  })();

  const progress = setInterval(
    () =>
      console.log(
        `soak: ${((Date.now() - started) / 1000).toFixed(0)} s, ${counts.requests} requests, ${counts.cuts} cuts, ${counts.status5xx} 5xx`,
      ),
    15_000,
  );
  await Promise.all([restart, ...Array.from({ length: clients }, () => client(ctx))]);
  clearInterval(progress);

  // Quiet now: every stored session must be there, then deleting them must leave no KV block held.
  const lost = await lostSessions(server.url, sessions);
  for (const s of sessions)
    await (await fetch(`${server.url}/v1/sessions/${s.id}`, { method: 'DELETE' })).arrayBuffer();
  let leaked = { blocks: 0, running: 0, queued: 0 };
  const deadline = Date.now() + 15_000;
  for (;;) {
    leaked = {
      blocks: await metric(server.url, 'edge_infer_kv_blocks_used'),
      running: await metric(server.url, 'edge_infer_running_requests'),
      queued: await metric(server.url, 'edge_infer_queue_depth'),
    };
    if ((leaked.blocks === 0 && leaked.running === 0 && leaked.queued === 0) || Date.now() > deadline) break;
    await new Promise((resolve) => setTimeout(resolve, 250));
  }
  await server.stop();
  rmSync(persist, { recursive: true, force: true });

  const uncaught = logLines.filter((l) => l.includes('Uncaught')).length;
  const seconds = (Date.now() - started) / 1000;
  console.log('\nsoak summary');
  console.log(`  duration          ${seconds.toFixed(0)} s, ${clients} clients, 1 restart`);
  console.log(
    `  requests          ${counts.requests} (${counts.ok} answered in full, ${(counts.requests / seconds).toFixed(1)}/s)`,
  );
  console.log(`  cuts              ${counts.cuts}`);
  console.log(
    `  4xx               ${counts.status4xx} (besides ${counts.busy} session_busy: a turn sent while its cut predecessor was still being cancelled)`,
  );
  console.log(`  5xx               ${counts.status5xx} (${counts.status5xxSteady} outside the restart)`);
  console.log(`  stream errors     ${counts.streamErrors}`);
  console.log(`  refused           ${counts.refused} (no connection: the server was restarting)`);
  console.log(
    `  sessions          ${counts.sessionsCreated} created, ${counts.turnsCompleted} turns answered, ${lost.length} lost`,
  );
  console.log(
    `  leaks             ${leaked.blocks} KV blocks used, ${leaked.running} running, ${leaked.queued} queued (after deleting every session)`,
  );
  console.log(`  server log        ${uncaught} "Uncaught" lines`);
  for (const l of lost) console.log(`  lost: ${l}`);
  const failed = counts.status5xxSteady > 0 || lost.length > 0 || leaked.blocks + leaked.running + leaked.queued > 0;
  process.exitCode = failed ? 1 : 0;
}

main().catch((err: unknown) => {
  console.error(err);
  process.exitCode = 1;
});
