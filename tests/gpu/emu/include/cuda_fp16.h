/* empty: the emulator's cuda_emu.h provides what the GEMM kernels use */
