/* safetensors files (nb_safetensors_read: header length, the JSON header, dtypes, shapes,
 * offsets, metadata; F16/BF16/F64 converted), from a file in a scratch directory, and for one that
 * loads: every tensor's data read, every name found again, the metadata looked up. */
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = nb_fuzz_write_file("input.safetensors", data, size);
    nb_safetensors *f = NULL;
    if (nb_safetensors_read(path, &f) != NB_OK) {
        if (f) nb_fuzz_fail("nb_safetensors_read failed but returned a file", NULL);
        return 0;
    }
    int n = -1;
    if (nb_safetensors_count(f, &n) != NB_OK || n < 0) nb_fuzz_fail("nb_safetensors_count", nb_last_error());
    volatile float sink = 0.0f;
    for (int i = 0; i < n; i++) {
        const nb_st_tensor *t = NULL, *again = NULL;
        if (nb_safetensors_get(f, i, &t) != NB_OK || !t || !t->name)
            nb_fuzz_fail("nb_safetensors_get", nb_last_error());
        if (t->ndim < 0 || t->ndim > NB_ST_MAX_DIMS) nb_fuzz_fail("tensor rank out of range", t->name);
        int64_t numel = 1;
        for (int d = 0; d < t->ndim; d++) {
            if (t->shape[d] < 0) nb_fuzz_fail("negative dimension", t->name);
            numel *= t->shape[d];
        }
        if (numel > (int64_t)size) nb_fuzz_fail("more elements than the file has bytes", t->name);
        for (int64_t k = 0; k < numel; k++) sink += t->data[k]; /* ASan checks every element */
        if (nb_safetensors_find(f, t->name, &again) != NB_OK || !again)
            nb_fuzz_fail("a tensor's own name is not found", t->name);
    }
    (void)sink;
    static const char *const keys[] = {"format", "image_size", "", "__metadata__"};
    for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) {
        const char *v = NULL;
        if (nb_safetensors_meta(f, keys[k], &v) != NB_OK) nb_fuzz_fail("nb_safetensors_meta", nb_last_error());
        if (v) (void)strlen(v);
    }
    nb_safetensors_free(f);
    return 0;
}
