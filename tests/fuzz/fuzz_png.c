/* PNG decoding (nb_image_read_png: our signature and size checks, then libpng's simplified API
 * through dlopen) from a file in a scratch directory; channels 0 (as stored), then 1 (gray). */
#include <stdlib.h>

#include "fuzz_common.h"

static void read_as(const char *path, int channels) {
    nb_tensor *t = NULL;
    if (nb_image_read_png(path, channels, nb_fuzz_cpu(), &t) != NB_OK) {
        if (t) nb_fuzz_fail("nb_image_read_png failed but returned a tensor", NULL);
        return;
    }
    const int64_t *shape = nb_tensor_shape(t);
    if (nb_tensor_ndim(t) != 3 || shape[0] < 1 || shape[1] < 1 || (channels && shape[2] != channels))
        nb_fuzz_fail("nb_image_read_png: unexpected shape", NULL);
    nb_tensor_free(t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = nb_fuzz_write_file("input.png", data, size);
    read_as(path, 0);
    read_as(path, 1);
    return 0;
}
