/* The cast op (NB_TOP_CAST, op_rows.h): a value converted between the tape's storage
 * dtypes f32 and bf16. nb_tape_record inserts it before a row that reads f32 only when an input
 * is bf16 (a bf16-storage CUDA tape, nb_tape_bf16_storage), and nb_tape_cast records it on
 * request. Forward: y = dtype(x) (bf16 rounds to nearest even); backward: dx (+)= dtype_x(dy).
 * CPU rows convert with nb_f32_to_bf16 / nb_bf16_to_f32 (CPU tapes hold f32 only, so there the
 * op is a copy); the CUDA row is one grid-stride kernel each way. */

#include "jit/cuda_files.h"
#include "jit/jit.h"
#include "graph/op_rows.h"

/* ---- CPU ------------------------------------------------------------------------------------ */

static float cpu_ld(const void *p, int64_t i, nb_dtype dt) {
    return dt == NB_BF16 ? nb_bf16_to_f32(((const uint16_t *)p)[i]) : ((const float *)p)[i];
}

static void cpu_st(void *p, int64_t i, nb_dtype dt, float v) {
    if (dt == NB_BF16) ((uint16_t *)p)[i] = nb_f32_to_bf16(v);
    else ((float *)p)[i] = v;
}

nb_status nb_op_cast_cpu_fwd(nb_tape *t, nb_top *op) {
    const nb_tval *x = &t->vals[op->in[0]], *y = &t->vals[op->out];
    nb_convert(y->data, y->dtype, x->data, x->dtype, (size_t)x->count);
    return NB_OK;
}

nb_status nb_op_cast_cpu_bwd(nb_tape *t, const nb_top *op) {
    const nb_tval *x = &t->vals[op->in[0]], *y = &t->vals[op->out];
    float *dx;
    int ow;
    nb_status s = nb_tape_grad_buf_w(t, op->in[0], &dx, &ow);
    if (s || !dx) return s;
    if (ow) {
        nb_convert(dx, x->dtype, y->grad, y->dtype, (size_t)x->count);
        return NB_OK;
    }
    for (int64_t i = 0; i < x->count; i++)
        cpu_st(dx, i, x->dtype, cpu_ld(dx, i, x->dtype) + cpu_ld(y->grad, i, y->dtype));
    return NB_OK;
}

/* ---- CUDA ----------------------------------------------------------------------------------- */

typedef struct {
    const void *x;
    void *y;
    long long n;
    int xbf, ybf, acc;
} cast_p;

static nb_status cast_launch(nb_tape *t, const void *x, nb_dtype xdt, void *y, nb_dtype ydt,
                             int64_t n, int acc) {
    if (!t->kern[NB_TK_CAST]) {
        nb_status s = nb_jit_cuda_kernel(t->dev, "src/graph/kernels/cast.cu", NULL, "tk_cast", &t->kern[NB_TK_CAST]);
        if (s) return s;
    }
    cast_p a = {x, y, (long long)n, xdt == NB_BF16, ydt == NB_BF16, acc};
    return nb_jit_launch_cuda(t->kern[NB_TK_CAST], &a, sizeof a, n / 4 + n % 4,
                              nb_device_stream(t->dev));
}

nb_status nb_op_cast_cuda_fwd(nb_tape *t, nb_top *op) {
    const nb_tval *x = &t->vals[op->in[0]], *y = &t->vals[op->out];
    return cast_launch(t, x->data, x->dtype, y->data, y->dtype, x->count, 0);
}

nb_status nb_op_cast_cuda_bwd(nb_tape *t, const nb_top *op) {
    const nb_tval *x = &t->vals[op->in[0]], *y = &t->vals[op->out];
    float *dx;
    int ow;
    nb_status s = nb_tape_grad_buf_w(t, op->in[0], &dx, &ow);
    if (s || !dx) return s;
    return cast_launch(t, y->grad, y->dtype, dx, x->dtype, x->count, !ow);
}

/* (the output's dtype is ip[0], set by nb_tape_cast, not by the flags) */
