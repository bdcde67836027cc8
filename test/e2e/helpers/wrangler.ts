// The e2e suite's server: `wrangler dev` (real workerd, real HTTP), shared with the soak run and the bench.
export { startDevServer, type DevServer } from '../../../scripts/lib/dev-server.js';
