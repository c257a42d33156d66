/* Reference-check helper (not part of the library): loads a UNet checkpoint, runs one forward on
 * raw f32 input files and writes the raw f32 output, for bench/torch/unet_ref_pure.py (and
 * unet_ref.py) to compare. Built as build/bench/unet_forward.
 *   unet_forward CKPT X.bin N T.bin OUT.bin     (X: [N,C,S,S] f32 LE, T: [N] f32) */
#include <stdio.h>
#include <stdlib.h>

#include "nabla/nn_unet.h"

static float *read_f32(const char *path, size_t n) {
    FILE *f = fopen(path, "rb");
    float *p = malloc(n * sizeof(float));
    if (!f || !p || fread(p, sizeof(float), n, f) != n) {
        fprintf(stderr, "cannot read %zu floats from %s\n", n, path);
        exit(1);
    }
    fclose(f);
    return p;
}

int main(int argc, char **argv) {
    if (argc != 6) {
        fprintf(stderr, "usage: unet_forward CKPT X.bin N T.bin OUT.bin\n");
        return 2;
    }
    nb_unet_config c;
    nb_tape *t;
    nb_unet *u;
    int n = atoi(argv[3]);
    if (nb_unet_read_config(argv[1], &c) || nb_tape_create(&t) || nb_unet_create(&c, t, &u) ||
        nb_unet_load(u, argv[1])) {
        fprintf(stderr, "unet_forward: %s\n", nb_last_error());
        return 1;
    }
    size_t img = (size_t)c.in_channels * c.image_size * c.image_size;
    float *x = read_f32(argv[2], img * n), *ts = read_f32(argv[4], (size_t)n), *y;
    nb_tvar xv, yv;
    int64_t cnt;
    if (nb_tape_input(t, 4, (int64_t[]){n, c.in_channels, c.image_size, c.image_size}, x, 0, &xv) ||
        nb_unet_forward(u, xv, ts, &yv) || nb_tape_data(t, yv, &y, &cnt)) {
        fprintf(stderr, "unet_forward: %s\n", nb_last_error());
        return 1;
    }
    FILE *f = fopen(argv[5], "wb");
    if (!f || fwrite(y, sizeof(float), (size_t)cnt, f) != (size_t)cnt) return 1;
    fclose(f);
    printf("unet_forward: %lld outputs\n", (long long)cnt);
    return 0;
}
