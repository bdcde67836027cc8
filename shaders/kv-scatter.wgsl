// KV scatter: each step's new keys and values -> their blocks (one layer, keys and values at once).
// The GPU twin of PagedSequenceKv.scatter; values move as u32 bit patterns, so the copy is bit-exact.
//
// present_*: (rows, kv_heads, slots, head_dim)            ORT's present.{layer}.key|value
// pool_*:    (num_blocks, kv_heads, block_size, head_dim)  the block pool of one layer
// Row b's `count` new tokens sit at slots [offset, offset + count) and go to token positions
// [length, length + count) of its block table. The host checks that those blocks are writable
// (held by this row alone, not cached) before it dispatches: a kernel cannot throw.
// One invocation per (row, head, new token < max_count, element).

struct Params {
  rows: u32,
  slots: u32,
  kv_heads: u32,
  head_dim: u32,
  block_size: u32,
  total: u32,     // rows * kv_heads * max_count * head_dim
  grid_x: u32,
  max_count: u32,
}

struct Row {
  length: u32,
  offset: u32,
  count: u32,
  table_start: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> rows: array<Row>;
@group(0) @binding(2) var<storage, read> tables: array<u32>;
@group(0) @binding(3) var<storage, read> present_keys: array<u32>;
@group(0) @binding(4) var<storage, read> present_values: array<u32>;
@group(0) @binding(5) var<storage, read_write> pool_keys: array<u32>;
@group(0) @binding(6) var<storage, read_write> pool_values: array<u32>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
  let i = gid.x + gid.y * params.grid_x * 64u;
  if (i >= params.total) {
    return;
  }
  let d = i % params.head_dim;
  var r = i / params.head_dim;
  let c = r % params.max_count;
  r = r / params.max_count;
  let h = r % params.kv_heads;
  let row = rows[r / params.kv_heads];
  if (c >= row.count) {
    return;
  }
  let pos = row.length + c;
  let block = tables[row.table_start + pos / params.block_size];
  let dst = ((block * params.kv_heads + h) * params.block_size + pos % params.block_size) * params.head_dim + d;
  let src = (((r / params.kv_heads) * params.kv_heads + h) * params.slots + row.offset + c) * params.head_dim + d;
  pool_keys[dst] = present_keys[src];
  pool_values[dst] = present_values[src];
}
