// KV gather: block table -> the contiguous past the model reads (one layer, keys and values at once).
// The GPU twin of PagedSequenceKv.gather; values move as u32 bit patterns, so the copy is bit-exact.
//
// pool_*:  (num_blocks, kv_heads, block_size, head_dim)   the block pool of one layer
// past_*:  (rows, kv_heads, slots, head_dim)              ORT's past_key_values.{layer}.key|value
// Row b's `length` tokens go to slots [offset, offset + length); every other slot is written as 0.
// One invocation per element of past_*; a 2-D grid because one dimension holds at most 65535 groups.

struct Params {
  rows: u32,
  slots: u32,
  kv_heads: u32,
  head_dim: u32,
  block_size: u32,
  total: u32,     // rows * kv_heads * slots * head_dim
  grid_x: u32,    // workgroups along x
  _pad: u32,
}

struct Row {
  length: u32,       // tokens stored (kv.length)
  offset: u32,       // slot of the first of them
  count: u32,        // unused here (scatter's new-token count)
  table_start: u32,  // index of the row's first block id in `tables`
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> rows: array<Row>;
@group(0) @binding(2) var<storage, read> tables: array<u32>;
@group(0) @binding(3) var<storage, read> pool_keys: array<u32>;
@group(0) @binding(4) var<storage, read> pool_values: array<u32>;
@group(0) @binding(5) var<storage, read_write> past_keys: array<u32>;
@group(0) @binding(6) var<storage, read_write> past_values: array<u32>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
  let i = gid.x + gid.y * params.grid_x * 64u;
  if (i >= params.total) {
    return;
  }
  let d = i % params.head_dim;
  var r = i / params.head_dim;
  let slot = r % params.slots;
  r = r / params.slots;
  let h = r % params.kv_heads;
  let row = rows[r / params.kv_heads];
  if (slot < row.offset || slot >= row.offset + row.length) {
    past_keys[i] = 0u;
    past_values[i] = 0u;
    return;
  }
  let t = slot - row.offset;
  let block = tables[row.table_start + t / params.block_size];
  let src = ((block * params.kv_heads + h) * params.block_size + t % params.block_size) * params.head_dim + d;
  past_keys[i] = pool_keys[src];
  past_values[i] = pool_values[src];
}
