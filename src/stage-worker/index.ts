// A pipeline stage Worker's entry (its config is generated: scripts/lib/stage-configs.ts). The head reaches
// its StageObject over RPC; nothing is served over HTTP, so a deployed stage answers every request 404.
export default {
  fetch: (): Response => new Response('not found', { status: 404 }),
};
export { StageObject } from '../objects/stage-object.js';
