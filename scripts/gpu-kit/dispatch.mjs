// The floor of a WGSL forward pass on this GPU through Dawn: N small dispatches (one per compute pass, as a layer's
// kernels would be) in one command buffer, submitted and awaited once per "step"; and one 16 MiB buffer read back.
const dawn = await import('/tmp/gpukit/app/node_modules/webgpu/index.js');
Object.assign(globalThis, dawn.globals);
const gpu = dawn.create([]);
const adapter = await gpu.requestAdapter({ powerPreference: 'high-performance' });
const device = await adapter.requestDevice();
const buf = device.createBuffer({ size: 1 << 24, usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC });
const mod = device.createShaderModule({
  code: `@group(0) @binding(0) var<storage, read_write> a: array<f32>;
@compute @workgroup_size(256) fn main(@builtin(global_invocation_id) g: vec3u) { let i = g.x; if (i < arrayLength(&a)) { a[i] = a[i] * 0.5 + 1.0; } }`,
});
const pipe = device.createComputePipeline({ layout: 'auto', compute: { module: mod, entryPoint: 'main' } });
const bg = device.createBindGroup({
  layout: pipe.getBindGroupLayout(0),
  entries: [{ binding: 0, resource: { buffer: buf, size: 4096 } }],
});
async function step(n, onePass) {
  const enc = device.createCommandEncoder();
  if (onePass) {
    const p = enc.beginComputePass();
    p.setPipeline(pipe);
    p.setBindGroup(0, bg);
    for (let i = 0; i < n; i++) p.dispatchWorkgroups(4);
    p.end();
  } else
    for (let i = 0; i < n; i++) {
      const p = enc.beginComputePass();
      p.setPipeline(pipe);
      p.setBindGroup(0, bg);
      p.dispatchWorkgroups(4);
      p.end();
    }
  device.queue.submit([enc.finish()]);
  await device.queue.onSubmittedWorkDone();
}
for (const onePass of [false, true])
  for (const n of [1, 100, 300, 1000]) {
    for (let w = 0; w < 3; w++) await step(n, onePass);
    const t = performance.now();
    const reps = 20;
    for (let r = 0; r < reps; r++) await step(n, onePass);
    const ms = (performance.now() - t) / reps;
    console.log(
      `${onePass ? 'one pass' : 'a pass each'}: ${n} dispatches per submit: ${ms.toFixed(3)} ms per step (${((ms * 1000) / n).toFixed(1)} us/dispatch)`,
    );
  }
const rb = device.createBuffer({ size: 1 << 24, usage: GPUBufferUsage.COPY_DST | GPUBufferUsage.MAP_READ });
for (const size of [4, 4096, 196608, 1 << 24]) {
  const t = performance.now();
  const reps = 10;
  for (let r = 0; r < reps; r++) {
    const e = device.createCommandEncoder();
    e.copyBufferToBuffer(buf, 0, rb, 0, size);
    device.queue.submit([e.finish()]);
    await rb.mapAsync(GPUMapMode.READ, 0, size);
    rb.unmap();
  }
  console.log(`readback ${size} B: ${((performance.now() - t) / reps).toFixed(3)} ms`);
}
process.exit(0);
