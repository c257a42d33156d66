/* The conv path's helper passes on CUDA (internal to src/nn; conv_cuda.c and conv_cuda_igemm.c
 * call them; the public-ish entry points are declared in conv_cuda.h). */
#ifndef NB_NN_CONV_CUDA_AUX_H
#define NB_NN_CONV_CUDA_AUX_H

#include "nn/conv/conv_cuda.h"
#include "jit/jit.h"

/* Units of planes for the row kernels (nb_conv_rows): y [N*O][P], 2^lg lanes per unit; set:
 * fill instead of add. Mirrors the kernels' RowP. */
typedef struct {
    void *y;
    const float *b;
    float *db;
    long long units;
    int P, O, bf, lg, segs, seg, vec, set;
} nb_row_p;
nb_row_p nb_conv_rows(nb_device *dev, void *y, nb_dtype ydt, const float *b, float *db,
                      int64_t N, int64_t O, int64_t P);
/* A kernel of this file's source (nb_conv_wcvt_fill for conv_cuda.c). */
nb_status nb_conv_aux_kernel(nb_device *dev, const char *entry, nb_jit_kernel **k);
/* dw += the Z partial sums part [Z][L], and db[o] += sum dy [N,O,P] (ydt) in the same launch
 * (db NULL: the sum alone). */
nb_status nb_conv_sum_splits_db(nb_device *dev, const float *part, float *dw, int64_t L,
                                int64_t Z, const void *dy, nb_dtype ydt, float *db, int64_t N,
                                int64_t O, int64_t P);

#endif
