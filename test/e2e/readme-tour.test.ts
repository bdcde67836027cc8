// README's tour, run as written: every block marked `<!-- tour:NAME -->` is executed against `wrangler dev`
// (sh blocks with bash and the real curl and jq, ts blocks with tsx), with only the address swapped for the
// test server's, and a webhook receiver standing where the tour says "port 9000". If the front page's
// commands stop working, this fails.
import { spawn } from 'node:child_process';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { fileURLToPath } from 'node:url';
import { Webhook } from 'standardwebhooks';
import { deliverySecret } from '../../src/objects/webhooks/delivery-key.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freePort } from '../../scripts/lib/free-port.js';
import { startConfiguredServer, type DevServer } from './helpers/wrangler.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const SCRATCH = `${ROOT}.scratch/`;

interface Block {
  name: string;
  lang: string;
  code: string;
}

/** The tour's blocks, in README order. */
function tourBlocks(markdown: string): Block[] {
  return [...markdown.matchAll(/<!-- tour:([\w-]+) -->\n```(\w+)\n([\s\S]*?)\n```/g)].map(([, name, lang, code]) => ({
    name,
    lang,
    code,
  }));
}

const blocks = tourBlocks(readFileSync(`${ROOT}README.md`, 'utf8'));
const block = (name: string): Block => {
  const found = blocks.find((b) => b.name === name);
  if (!found) throw new Error(`README has no tour block '${name}'`);
  return found;
};

interface Delivery {
  headers: Record<string, string>;
  body: string;
}

let server: DevServer;
let receiver: Server;
let receiverPort: number;
const deliveries: Delivery[] = [];

beforeAll(async () => {
  receiverPort = await freePort();
  receiver = createServer((req, res) => {
    let body = '';
    req.on('data', (d) => (body += d));
    req.on('end', () => {
      deliveries.push({ headers: req.headers as Record<string, string>, body });
      res.writeHead(204).end();
    });
  });
  await new Promise<void>((resolve) => receiver.listen(receiverPort, '127.0.0.1', resolve));
  server = await startConfiguredServer();
});
afterAll(async () => {
  await server?.stop();
  await new Promise((resolve) => receiver?.close(resolve));
});

/** The block's code aimed at the test server (and receiver) instead of the tour's fixed ports. */
function aimed(code: string): string {
  return code
    .replaceAll('127.0.0.1:8787', server.url.replace('http://', ''))
    .replaceAll('127.0.0.1:9000', `127.0.0.1:${receiverPort}`);
}

/** Runs a block as a user would; asynchronously, so the receiver in this process can answer meanwhile. */
function run(b: Block): Promise<{ status: number | null; stdout: string; stderr: string }> {
  let command: string[];
  if (b.lang === 'sh') command = ['bash', '-euo', 'pipefail', '-c', aimed(b.code)];
  else if (b.lang === 'ts') {
    mkdirSync(SCRATCH, { recursive: true });
    const file = `${SCRATCH}tour-${b.name}.ts`;
    writeFileSync(file, aimed(b.code));
    command = [process.execPath, '--import', 'tsx', file];
  } else throw new Error(`tour block '${b.name}' is ${b.lang}; the tour runs sh and ts`);
  return new Promise((resolve, reject) => {
    const child = spawn(command[0], command.slice(1), { cwd: ROOT, env: { ...process.env, NO_COLOR: '1' } });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => (stdout += d));
    child.stderr.on('data', (d) => (stderr += d));
    const timer = setTimeout(() => child.kill('SIGKILL'), 60_000);
    child.on('error', reject);
    child.on('close', (status) => {
      clearTimeout(timer);
      resolve({ status, stdout, stderr });
    });
  });
}

describe("README's tour", () => {
  it('has the four stops, in order', () => {
    expect(blocks.map((b) => b.name)).toEqual(['chat', 'openai', 'session', 'webhook']);
  });

  it('chat with curl', async () => {
    const { status, stdout, stderr } = await run(block('chat'));
    expect(status, stderr).toBe(0);
    const reply = JSON.parse(stdout);
    expect(reply.object).toBe('chat.completion');
    // The reply the tour quotes is the one it gets: its curl asks for temperature 0.
    const quoted = /`"content":"([^"]+)"` \(at temperature 0/.exec(readFileSync(`${ROOT}README.md`, 'utf8'));
    expect(quoted, 'README quotes the reply').not.toBeNull();
    expect(reply.choices[0].message.content).toBe(quoted![1]);
    expect(reply.usage.completion_tokens).toBeGreaterThan(0);
  });

  it('the openai client, streaming', async () => {
    const { status, stdout, stderr } = await run(block('openai'));
    expect(status, stderr).toBe(0);
    expect(stdout.length).toBeGreaterThan(0);
  });

  it('a session: the second turn is served from the cache the first left', async () => {
    const { status, stdout, stderr } = await run(block('session'));
    expect(status, stderr).toBe(0);
    expect(stdout).toMatch(/"prompt_tokens": \d+/);
    expect(stdout).toContain('"object":"chat.completion.chunk"');
    expect(stdout).toContain('data: [DONE]');
    const last = JSON.parse(stdout.slice(stdout.lastIndexOf('{')));
    expect(last.tokens).toBeGreaterThan(0);
    expect(last.cached_tokens).toBeGreaterThan(0);
  });

  it('a webhook: the signed event runs a job whose reply is delivered, signed, to the callback', async () => {
    const b = block('webhook');
    const { status, stdout, stderr } = await run(b);
    expect(status, stderr).toBe(0);
    const m = /^(delivering|delivered) (".*")$/m.exec(stdout.trim());
    expect(m, stdout).not.toBeNull();
    const text = JSON.parse(m![2]) as string;
    await expect.poll(() => deliveries.length, { timeout: 20_000 }).toBeGreaterThan(0);
    const secretBytes = /Buffer\.from\('([^']+)'\)/.exec(b.code)![1];
    // Deliveries are signed with the hook's delivery secret, derived from its secret (docs/sessions-webhooks.md);
    // the tour prints the one its PUT answered, which is what a receiver verifies with.
    const hookSecret = `whsec_${Buffer.from(secretBytes).toString('base64')}`;
    const printed = /^verify deliveries with (whsec_\S+)$/m.exec(stdout)?.[1];
    expect(printed, stdout).toBe(await deliverySecret(hookSecret));
    const payload = new Webhook(printed!).verify(deliveries[0].body, deliveries[0].headers) as {
      type: string;
      output: { text: string };
    };
    expect(payload.type).toBe('generation.completed');
    expect(payload.output.text).toBe(text);
  });
});
