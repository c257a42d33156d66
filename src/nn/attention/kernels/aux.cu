// The small module of nb_attn_delta / nb_attn_delta_t / nb_attn_dq_fin alone (no tiles: DP is
// only there for the shared helpers; tape_cuda_attn.c passes DP=16), per layout FM and storage SBF.
//! nvrtc-check: DP=16 FM=0 SBF=0
//! nvrtc-check: DP=16 FM=1 SBF=2
#include "attn_common.cuh"
#include "delta.cuh"
