import app from './app.js';

// The worker's entry: the Hono app's fetch, and the Durable Object class wrangler.toml binds as INFERENCE.
export default app;
export { InferenceObject } from '../objects/inference-object.js';
