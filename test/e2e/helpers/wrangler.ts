// The e2e suite's server: `wrangler dev` (real workerd, real HTTP), shared with the soak run and the bench.
// The suites check exact behaviour on the generated `tiny`, so that is what they serve unless they name a
// MODEL; the README tour and the playground take the server as configured (startConfiguredServer).
import {
  startDevServer as startConfiguredServer,
  type DevServer,
  type DevServerOptions,
} from '../../../scripts/lib/dev-server.js';

export { startConfiguredServer, type DevServer };

export function startDevServer(
  vars: Record<string, string> = {},
  persistDir?: string,
  options: DevServerOptions = {},
): Promise<DevServer> {
  return startConfiguredServer({ MODEL: 'tiny', ...vars }, persistDir, options);
}
