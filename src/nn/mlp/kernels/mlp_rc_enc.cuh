// The recomputing backward with the grid-encoding backward fused in (mlp.cu with ENC=1: after
// mlp_rc.cuh, with src/nn/encoding/kernels/grid_scatter.cuh before mlp_head.cuh instead of
// mlp_enc_stub.cuh; only for nb_encoding_backward_mlp / nb_encoding_mlp_train).
extern "C" __global__ void __launch_bounds__(FW * 32, RCMINB) mlp_bwd_rc_enc(MlpParams p) { bwd_rc_body<2>(p); }
extern "C" __global__ void __launch_bounds__(FW * 32, RCMINB) mlp_train_rc_enc_f16(MlpParams p) { bwd_rc_body<2, 1, 1>(p); }
extern "C" __global__ void __launch_bounds__(FW * 32, RCMINB) mlp_train_rc_enc_f32(MlpParams p) { bwd_rc_body<2, 1, 0>(p); }
