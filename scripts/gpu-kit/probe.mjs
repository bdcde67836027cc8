// Which adapter Dawn (the `webgpu` package) picks, asked the way the engine asks
// (src/engine/runners/webgpu/device.ts: requestAdapter({ powerPreference: 'high-performance' })).
// Prints one JSON line; exit 2 when there is no adapter. Usage: node probe.mjs [out.json]
import { writeFileSync } from 'node:fs';

process.env.XDG_RUNTIME_DIR ??= '/tmp';
const dawn = await import('webgpu');
Object.assign(globalThis, dawn.globals);
const gpu = dawn.create([]);
const report = { ok: false };
try {
  const adapter = await gpu.requestAdapter({ powerPreference: 'high-performance' });
  if (adapter) {
    const info = adapter.info ?? {};
    const pick = {};
    for (const k of [
      'vendor',
      'architecture',
      'device',
      'description',
      'isFallbackAdapter',
      'subgroupMinSize',
      'subgroupMaxSize',
    ])
      if (info[k] !== undefined) pick[k] = info[k];
    if (pick.isFallbackAdapter === undefined && adapter.isFallbackAdapter !== undefined)
      pick.isFallbackAdapter = adapter.isFallbackAdapter;
    const limits = {};
    for (const k of [
      'maxBufferSize',
      'maxStorageBufferBindingSize',
      'maxComputeWorkgroupStorageSize',
      'maxComputeInvocationsPerWorkgroup',
      'maxStorageBuffersPerShaderStage',
    ])
      limits[k] = adapter.limits[k];
    Object.assign(report, { ok: true, info: pick, features: [...adapter.features].sort(), limits });
    const low = await gpu.requestAdapter({ powerPreference: 'low-power' });
    if (low && low.info?.description !== adapter.info?.description)
      report.lowPowerAdapter = `${low.info?.vendor} ${low.info?.device} ${low.info?.description}`;
  }
} catch (e) {
  report.error = String(e?.stack ?? e);
}
const line = JSON.stringify(report);
console.log(`adapter: ${line}`);
if (process.argv[2]) writeFileSync(process.argv[2], `${JSON.stringify(report, null, 1)}\n`);
process.exit(report.ok ? 0 : 2);
