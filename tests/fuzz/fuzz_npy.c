/* .npy images from memory (nb_tensor_load_npy_mem: magic, version, the header dict, shape and
 * size checks), and, for one that loads, its data read back. */
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    nb_tensor *t = NULL;
    nb_status s = nb_tensor_load_npy_mem(nb_fuzz_cpu(), data, size, "fuzz.npy", &t);
    if (s != NB_OK) {
        if (t) nb_fuzz_fail("nb_tensor_load_npy_mem failed but returned a tensor", NULL);
        return 0;
    }
    size_t nbytes = nb_tensor_nbytes(t);
    if (nbytes > size) nb_fuzz_fail("tensor larger than its .npy file", NULL);
    void *host = malloc(nbytes ? nbytes : 1);
    if (!host) abort();
    if (nb_tensor_to_host(t, host, nbytes) != NB_OK) nb_fuzz_fail("nb_tensor_to_host", nb_last_error());
    /* the data are the file's last nbytes bytes, copied as they are */
    if (nbytes && memcmp(host, data + size - nbytes, nbytes) != 0)
        nb_fuzz_fail("tensor data differ from the file's data section", NULL);
    free(host);
    nb_tensor_free(t);
    return 0;
}
