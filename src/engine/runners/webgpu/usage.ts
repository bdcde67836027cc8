/**
 * WebGPU's buffer usage and map mode flags as plain numbers (values fixed by the WebGPU spec), so these
 * modules load where the GPUBufferUsage global does not exist (workerd, or Node before Dawn is set up).
 */
export const BufferUsage = {
  MAP_READ: 0x0001,
  MAP_WRITE: 0x0002,
  COPY_SRC: 0x0004,
  COPY_DST: 0x0008,
  UNIFORM: 0x0040,
  STORAGE: 0x0080,
} as const;

export const MAP_MODE_READ = 0x0001;
