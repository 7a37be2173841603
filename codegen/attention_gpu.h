/*
 * attention_gpu.h — the parts of the GPU flash-attention kernels
 * (codegen/attention_gpu.c) beyond gpu_kernels.h's interface that the
 * tests and docs need: the kernels a plan launches, their names, and the
 * tile sizes each is compiled with.
 */
#ifndef KCG_ATTENTION_GPU_H
#define KCG_ATTENTION_GPU_H

#include <stddef.h>

typedef enum kcg_attn_gpu_kernel {
  KCG_ATTN_GPU_FWD,    /* forward: a block per (query tile, batch * head) */
  KCG_ATTN_GPU_DELTA,  /* backward 1: delta = rowsum(dout * out) into scratch */
  KCG_ATTN_GPU_DKV,    /* backward 2: a block per (key tile, batch * kv head) */
  KCG_ATTN_GPU_DQ,     /* backward 3: a block per (query tile, batch * head) */
  KCG_ATTN_GPU_FWD_TC, /* forward on tensor cores (f16, bf16; CUDA sm_80+): as FWD */
  KCG_ATTN_GPU_DKV_TC, /* backward 2 on tensor cores: as DKV */
  KCG_ATTN_GPU_DQ_TC   /* backward 3 on tensor cores: as DQ */
} kcg_attn_gpu_kernel;

/*
 * The query rows `br` and key rows `bc` of one tile of kernel `kind`, for
 * arithmetic of `es` bytes (4: f32, f16, bf16; 8: f64) and padded head dim
 * `dm` (16, 32, 64, 128). FWD and DQ blocks cover br query rows, DKV
 * blocks bc keys.
 */
void kcg_attention_gpu_tiles(kcg_attn_gpu_kernel kind, int es, int dm, int *br, int *bc);

/* The __global__ function's name: kiln_fa_fwd_d64, kiln_fa_delta, ... */
void kcg_attention_gpu_kernel_name(kcg_attn_gpu_kernel kind, int dm, char *buf, size_t n);

#endif
