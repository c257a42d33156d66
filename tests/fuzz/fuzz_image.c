/* Image files of every format nb_image_read tells by content (JPEG, OpenEXR, BMP, Radiance HDR,
 * PFM, PPM / PGM, PNG; the signatures of formats it refuses), and the same bytes as a ".tga" file
 * (TGA has no signature): a result must be an f32 [H, W, C] tensor with C 1..4 and the info
 * filled; a failure must leave no tensor. */
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"

static void read_one(const char *path) {
    nb_tensor *t = NULL;
    nb_image_info info;
    memset(&info, 0, sizeof info);
    if (nb_image_read(path, nb_fuzz_cpu(), &info, &t) != NB_OK) {
        if (t) nb_fuzz_fail("nb_image_read failed but returned a tensor", NULL);
        return;
    }
    const int64_t *shape = nb_tensor_shape(t);
    if (nb_tensor_ndim(t) != 3 || shape[0] != info.height || shape[1] != info.width || shape[2] != info.channels ||
        info.channels < 1 || info.channels > 4 || !info.format)
        nb_fuzz_fail("nb_image_read: the tensor does not match its info", info.format);
    nb_tensor_free(t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    read_one(nb_fuzz_write_file("input.img", data, size));
    read_one(nb_fuzz_write_file("input.tga", data, size));
    return 0;
}
