// WebGPU's types (GPUDevice, GPUBuffer, ...) for the GPU backend; TypeScript's DOM lib does not have them yet.
/// <reference types="@webgpu/types" />
