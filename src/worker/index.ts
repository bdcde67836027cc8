import { Hono } from 'hono';

// The HTTP service grows here (OpenAI-compatible routes, sessions, webhooks); for now it names itself.
const app = new Hono();
app.get('/', (c) => c.json({ name: 'edge-infer', docs: 'see README.md' }));

export default app;
