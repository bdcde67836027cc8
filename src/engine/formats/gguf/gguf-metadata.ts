// GGUF metadata values (gguf.h's enum gguf_type) and a map of them with typed getters whose errors name
// the key, so a loader reads `meta.u32('llama.block_count')` and a bad file says which key is wrong.

/** Value type ids as stored in the file. */
export const GGUF_VALUE_TYPE = {
  u8: 0,
  i8: 1,
  u16: 2,
  i16: 3,
  u32: 4,
  i32: 5,
  f32: 6,
  bool: 7,
  string: 8,
  array: 9,
  u64: 10,
  i64: 11,
  f64: 12,
} as const;

export type GgufValueType = keyof typeof GGUF_VALUE_TYPE;

/** An array's items: numbers as typed arrays (a 49,152-entry token_type array is one copy, not 49,152 objects). */
export type GgufArrayItems =
  | Uint8Array
  | Int8Array
  | Uint16Array
  | Int16Array
  | Uint32Array
  | Int32Array
  | BigUint64Array
  | BigInt64Array
  | Float32Array
  | Float64Array
  | boolean[]
  | string[]
  | GgufArrayItems[];

export type GgufValue =
  | { type: 'u8' | 'i8' | 'u16' | 'i16' | 'u32' | 'i32' | 'f32' | 'f64'; value: number }
  | { type: 'u64' | 'i64'; value: bigint }
  | { type: 'bool'; value: boolean }
  | { type: 'string'; value: string }
  | { type: 'array'; itemType: GgufValueType; value: GgufArrayItems };

const INTEGER_TYPES: ReadonlySet<GgufValueType> = new Set(['u8', 'i8', 'u16', 'i16', 'u32', 'i32', 'u64', 'i64']);

function describe(v: GgufValue): string {
  return v.type === 'array' ? `an array of ${v.itemType} (${v.value.length})` : `a ${v.type} (${String(v.value)})`;
}

/** Metadata in file order, with getters that check types and name the key in their errors. */
export class GgufMetadata extends Map<string, GgufValue> {
  private need(key: string): GgufValue {
    const v = this.get(key);
    if (v === undefined) throw new Error(`GGUF metadata has no ${key}`);
    return v;
  }

  private wrong(key: string, v: GgufValue, wanted: string): Error {
    return new Error(`GGUF metadata ${key} is ${describe(v)}, not ${wanted}`);
  }

  /** A string value; `fallback` when the key is absent (absent and no fallback: an error). */
  str(key: string, fallback?: string): string {
    if (fallback !== undefined && !this.has(key)) return fallback;
    const v = this.need(key);
    if (v.type !== 'string') throw this.wrong(key, v, 'a string');
    return v.value;
  }

  /** An integer of any stored width that fits 0..2^32-1. */
  u32(key: string, fallback?: number): number {
    if (fallback !== undefined && !this.has(key)) return fallback;
    const v = this.need(key);
    if (!INTEGER_TYPES.has(v.type)) throw this.wrong(key, v, 'an unsigned 32-bit integer');
    const n = Number(v.value);
    if (!Number.isSafeInteger(n) || n < 0 || n > 0xffffffff) throw this.wrong(key, v, 'an unsigned 32-bit integer');
    return n;
  }

  /** A float32 / float64, or an integer (converters write some floats as integers). */
  f32(key: string, fallback?: number): number {
    if (fallback !== undefined && !this.has(key)) return fallback;
    const v = this.need(key);
    if (v.type === 'f32' || v.type === 'f64') return v.value;
    if (INTEGER_TYPES.has(v.type)) return Number(v.value);
    throw this.wrong(key, v, 'a number');
  }

  bool(key: string, fallback?: boolean): boolean {
    if (fallback !== undefined && !this.has(key)) return fallback;
    const v = this.need(key);
    if (v.type !== 'bool') throw this.wrong(key, v, 'a bool');
    return v.value;
  }

  /** An array's items, of any item type. */
  arr(key: string): GgufArrayItems {
    const v = this.need(key);
    if (v.type !== 'array') throw this.wrong(key, v, 'an array');
    return v.value;
  }

  /** An array of strings (token texts, merges). */
  strings(key: string): string[] {
    const v = this.need(key);
    if (v.type !== 'array' || v.itemType !== 'string') throw this.wrong(key, v, 'an array of strings');
    return v.value as string[];
  }

  /** An array of numbers of any width below 64 bits (token types, scores). */
  numbers(key: string): ArrayLike<number> {
    const v = this.need(key);
    const narrow = v.type === 'array' && v.itemType !== 'u64' && v.itemType !== 'i64';
    if (!narrow || !(INTEGER_TYPES.has(v.itemType) || v.itemType === 'f32' || v.itemType === 'f64'))
      throw this.wrong(key, v, 'an array of numbers');
    return v.value as ArrayLike<number>;
  }
}
