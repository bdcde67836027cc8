const PAGE = 65536;

export const align = (n: number, to: number): number => Math.ceil(n / to) * to;

/** One live allocation: bytes [start, end) of linear memory. */
interface Span {
  start: number;
  end: number;
}

/**
 * The kernels' linear memory: one WebAssembly.Memory holding the weights, every KV pool and the scratch,
 * with a first-fit allocator over it. Weights are placed once and never freed; a KV pool is freed when the
 * engine that owns it lets go (an object of the isolate going away), and the next pool reuses its bytes,
 * since a WebAssembly memory grows but never shrinks. Typed views die when the memory grows, so views are
 * made fresh from pointers (`f32`, `u8`) and whoever keeps one (a KV pool's arrays) registers to have it
 * remade (`onGrow`).
 */
export class LinearMemory {
  /** Live allocations in address order. */
  private readonly spans: Span[] = [];
  private readonly base: number;
  private readonly growListeners = new Set<() => void>();

  constructor(
    readonly memory: WebAssembly.Memory,
    heapBase: number,
  ) {
    this.base = align(heapBase, 64);
  }

  get bytes(): number {
    return this.memory.buffer.byteLength;
  }

  /** The end of the highest live allocation: what the memory must hold. */
  get used(): number {
    return this.spans.length ? this.spans[this.spans.length - 1].end : this.base;
  }

  /** Bytes of live allocations (`used` less the gaps freed pools left). */
  get allocated(): number {
    return this.spans.reduce((n, s) => n + s.end - s.start, 0);
  }

  /** `size` bytes at a 64-byte-aligned offset: the first gap that holds them, else the top (growing the memory). */
  alloc(size: number): number {
    const length = align(Math.max(size, 1), 64);
    let at = this.base;
    let index = 0;
    for (; index < this.spans.length; index++) {
      if (this.spans[index].start - at >= length) break;
      at = this.spans[index].end;
    }
    this.spans.splice(index, 0, { start: at, end: at + length });
    if (at + length > this.memory.buffer.byteLength) {
      this.memory.grow(Math.ceil((at + length - this.memory.buffer.byteLength) / PAGE));
      for (const listener of this.growListeners) listener();
    }
    return at;
  }

  /** Gives back an allocation `alloc` returned. */
  free(ptr: number): void {
    const index = this.spans.findIndex((s) => s.start === ptr);
    if (index < 0) throw new Error(`linear memory: ${ptr} is not an allocation`);
    this.spans.splice(index, 1);
  }

  write(ptr: number, bytes: Uint8Array): void {
    this.u8(ptr, bytes.length).set(bytes);
  }

  read(ptr: number, size: number): Uint8Array {
    return this.u8(ptr, size).slice();
  }

  /** Calls `listener` after every growth; the returned function stops that. */
  onGrow(listener: () => void): () => void {
    this.growListeners.add(listener);
    return () => this.growListeners.delete(listener);
  }

  f32(ptr: number, length: number): Float32Array {
    return new Float32Array(this.memory.buffer, ptr, length);
  }

  u8(ptr: number, length: number): Uint8Array {
    return new Uint8Array(this.memory.buffer, ptr, length);
  }

  i32(ptr: number, length: number): Int32Array {
    return new Int32Array(this.memory.buffer, ptr, length);
  }
}

/**
 * Scratch shared by every runner over one model's memory: a region handed out again from its start by each
 * pass (`begin`). Passes never interleave (a kernel pass runs start to end without yielding, and its engine
 * reads the logits before it yields), so one region serves every engine in the isolate. Each pass gets a
 * new epoch; what a pass left in scratch is valid only while the epoch is still its own (`current`).
 */
export class ScratchArena {
  private ptr = 0;
  private size = 0;
  private top = 0;
  private epoch = 0;

  constructor(private readonly memory: LinearMemory) {}

  /** Bytes the arena holds. */
  get bytes(): number {
    return this.size;
  }

  /** Makes the region at least `size` bytes (between passes only: what was in it is lost). */
  reserve(size: number): void {
    if (size <= this.size) return;
    if (this.size) this.memory.free(this.ptr);
    this.ptr = this.memory.alloc(size);
    this.size = align(size, 64);
  }

  /** Starts a pass: the whole region is free again; returns the pass's epoch. */
  begin(): number {
    this.top = this.ptr;
    return ++this.epoch;
  }

  /** Whether `epoch`'s pass is still the last one (its scratch not yet overwritten). */
  current(epoch: number): boolean {
    return epoch === this.epoch;
  }

  /** `size` bytes of this pass's scratch. */
  alloc(size: number): number {
    const at = this.top;
    const end = at + align(size, 64);
    if (end > this.ptr + this.size)
      throw new Error(`kernel scratch: a pass needs more than the ${this.size} bytes reserved for it`);
    this.top = end;
    return at;
  }
}
