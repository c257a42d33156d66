// The fully fused MLP kernels (loaded by mlp_cuda.c through nb_jit_cuda_kernel), specialised by
// -D defines for one configuration: W, IN_PAD, OUT_PAD, N_IN, N_OUT, NL, ACT, OUT_ACT, HAS_BIAS,
// IS_BF16, MT, WARPS, MINB, NCHO, NCHI, WSMEM_F, WSMEM_B, DWW, FW, FMINB, FWSMEM, FR16, FKD, FKH,
// KSPL, FPF, RCMINB, and RC (1: the recomputing backward of mlp_rc.cuh is compiled in).
//
// Tensor-core tiles: mma.sync m16n8k16, operands f16/bf16, accumulators f32. A warp owns MT
// tiles of 16 rows; activations go from the accumulators (C layout) straight into the next
// layer's A fragments in registers (C tiles 2k and 2k+1 are A k-tile k). Weights are staged
// into shared memory once per (persistent) block, rows padded by 8 halves so that the B
// fragment loads are free of bank conflicts. Saved tensors (layer inputs, pre-activations,
// back-propagated gradients) are kept in "fragment order": for each 16-row tile and each
// 16-column tile, 32 lanes x uint4 = the four A-fragment registers of every lane, so saving and
// reloading are fully coalesced 512-byte warp accesses. The weight-gradient kernel transposes
// fragments with movmatrix to put the batch on the reduction axis.
//
// ENC=1 (with RC=1): the variant with a 2-D grid encoding's backward fused in (mlp_bwd_rc_enc,
// mlp_train_rc_enc_*): src/nn/encoding/kernels/grid_scatter.cuh in place of mlp_enc_stub.cuh,
// configured by its ENC_* defines (nb_enc_cuda_mlp_defines), and mlp_rc_enc.cuh.
//
//! nvrtc-check: W=64 IN_PAD=32 OUT_PAD=16 N_IN=32 N_OUT=3 NL=3 ACT=1 OUT_ACT=0 HAS_BIAS=0 IS_BF16=0 MT=1 WARPS=8 MINB=3 NCHO=2 NCHI=4 WSMEM_F=1 WSMEM_B=1 DWW=8 FW=8 FMINB=1 FWSMEM=1 FR16=8 FKD=4 FKH=4 KSPL=1 FPF=1 RCMINB=1 RC=1
//! nvrtc-check: W=32 IN_PAD=16 OUT_PAD=16 N_IN=5 N_OUT=7 NL=5 ACT=4 OUT_ACT=5 HAS_BIAS=0 IS_BF16=1 MT=4 WARPS=8 MINB=2 NCHO=2 NCHI=2 WSMEM_F=1 WSMEM_B=1 DWW=8 FW=8 FMINB=1 FWSMEM=1 FR16=32 FKD=2 FKH=2 KSPL=4 FPF=1 RCMINB=1 RC=0
//! nvrtc-check: W=64 IN_PAD=16 OUT_PAD=16 N_IN=16 N_OUT=3 NL=3 ACT=1 OUT_ACT=0 HAS_BIAS=0 IS_BF16=0 MT=1 WARPS=8 MINB=3 NCHO=2 NCHI=2 WSMEM_F=1 WSMEM_B=1 DWW=8 FW=8 FMINB=1 FWSMEM=1 FR16=8 FKD=4 FKH=4 KSPL=1 FPF=1 RCMINB=2 RC=1 ENC=1 ENC_L=8 ENC_SMEM_LEVELS=3 ENC_SMEM_FLOATS=11206 ENC_AGG=0 ENC_SX=17,33,65,129,257,513,1025,2049 ENC_SY=17,33,65,129,257,513,1025,2049 ENC_OFF=0,578,2756,11206,44488,110024,175560,241096 ENC_MASK=0,0,0,0,32767,32767,32767,32767
#if ENC
#include "nn/encoding/kernels/grid_scatter.cuh"
#else
#include "mlp_enc_stub.cuh"
#endif
#include "mlp_head.cuh"
#include "mlp_asm.cuh"
#include "mlp_body.cuh"
#include "mlp_fused.cuh"
#if RC
#include "mlp_rc.cuh"
#endif
#if ENC
#include "mlp_rc_enc.cuh"
#endif
