/** The model is not one the kernels cover; the runner falls back to onnxruntime (or refuses) with this reason. */
export class UnsupportedByKernels extends Error {}
