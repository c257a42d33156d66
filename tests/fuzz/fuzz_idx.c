/* IDX image files (Fashion-MNIST's train-images-idx3-ubyte, read by nb_dataset_fashion_mnist),
 * raw or gzip-compressed (an input starting with the gzip magic is written as the .gz file), from
 * a scratch directory; loaded at 32x32 (the padded copy) and, when that works, at 12x12 with 3
 * channels (the resize and channel copies). */
#include "fuzz_common.h"

static void load(int image_size, int channels, int *ok) {
    nb_dataset *ds = NULL;
    *ok = nb_dataset_fashion_mnist(nb_fuzz_dir(), image_size, channels, &ds) == NB_OK;
    if (!*ok) {
        if (ds) nb_fuzz_fail("nb_dataset_fashion_mnist failed but returned a data set", NULL);
        return;
    }
    int64_t n = 0;
    if (nb_dataset_count(ds, &n) != NB_OK || n < 1) nb_fuzz_fail("nb_dataset_count", nb_last_error());
    volatile float sink = 0.0f;
    const float *img = NULL;
    if (nb_dataset_image(ds, n - 1, &img) != NB_OK || !img) nb_fuzz_fail("nb_dataset_image", nb_last_error());
    for (int k = 0; k < channels * image_size * image_size; k++) sink += img[k];
    (void)sink;
    nb_dataset_free(ds);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    int gz = size >= 2 && data[0] == 0x1f && data[1] == 0x8b;
    nb_fuzz_remove_file(gz ? "train-images-idx3-ubyte" : "train-images-idx3-ubyte.gz");
    nb_fuzz_write_file(gz ? "train-images-idx3-ubyte.gz" : "train-images-idx3-ubyte", data, size);
    int ok = 0;
    load(32, 1, &ok);
    if (ok) load(12, 3, &ok);
    return 0;
}
