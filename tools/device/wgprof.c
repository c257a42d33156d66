/* One convolution's passes in a loop, for ncu (tools/device/wgprof.sh):
 *   wgprof C O S PREC(1 tf32 | 2 bf16) WHAT(f = forward, d = data grad, w = weight grad) [iters] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nabla/device.h"
#include "nabla/nn_tape.h"
#include "nn/conv/conv_cuda.h"

int main(int argc, char **argv) {
    if (argc < 6) return 2;
    int C = atoi(argv[1]), O = atoi(argv[2]), S = atoi(argv[3]), prec = atoi(argv[4]);
    char what = argv[5][0];
    int iters = argc > 6 ? atoi(argv[6]) : 5;
    nb_device *g;
    if (nb_device_open("cuda", &g)) return fprintf(stderr, "%s\n", nb_last_error()), 1;
    nb_dtype dt = prec == 2 ? NB_BF16 : NB_F32;
    size_t es = prec == 2 ? 2 : 4, N = 32;
    nb_buffer *bx, *by, *bw, *bdx, *bdw;
    size_t nx = N * C * S * S, ny = N * O * S * S, nw = (size_t)O * C * 9;
    if (nb_buffer_alloc(g, nx * es, &bx) || nb_buffer_alloc(g, ny * es, &by) ||
        nb_buffer_alloc(g, nw * 4, &bw) || nb_buffer_alloc(g, nx * es, &bdx) || nb_buffer_alloc(g, nw * 4, &bdw))
        return 1;
    nb_memset(g, nb_buffer_ptr(bx), 0x3c, nx * es), nb_memset(g, nb_buffer_ptr(by), 0x3c, ny * es);
    nb_memset(g, nb_buffer_ptr(bw), 0, nw * 4), nb_memset(g, nb_buffer_ptr(bdw), 0, nw * 4);
    nb_conv_dims d;
    if (nb_conv_dims_make(&d, N, C, S, S, O, 3, 1, 1)) return 1;
    nb_event *e0, *e1;
    nb_event_create(g, &e0), nb_event_create(g, &e1);
    for (int it = 0; it < iters; it++) {
        if (it == iters - 3) nb_event_record(e0, NULL);
        nb_status s = what == 'f' ? nb_cuda_conv2d_forward(g, prec, &d, dt, dt, nb_buffer_ptr(bx), nb_buffer_ptr(bw), NULL, nb_buffer_ptr(by))
                    : what == 'd' ? nb_cuda_conv2d_backward(g, prec, &d, dt, dt, nb_buffer_ptr(bx), nb_buffer_ptr(bw), nb_buffer_ptr(by), nb_buffer_ptr(bdx), NULL, NULL, 1)
                    : nb_cuda_conv2d_backward(g, prec, &d, dt, dt, nb_buffer_ptr(bx), nb_buffer_ptr(bw), nb_buffer_ptr(by), NULL, nb_buffer_ptr(bdw), NULL, 1);
        if (s) return fprintf(stderr, "%s\n", nb_last_error()), 1;
    }
    nb_event_record(e1, NULL);
    nb_event_synchronize(e1);
    float ms;
    nb_event_elapsed_ms(e0, e1, &ms);
    double fl = 2.0 * N * O * S * S * C * 9;
    printf("C%d O%d S%d prec %d %c: %.1f us  %.1f TFLOP/s\n", C, O, S, prec, what, ms / 3 * 1e3, fl / (ms / 3 * 1e-3) * 1e-12);
    return 0;
}
