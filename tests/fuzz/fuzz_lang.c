/* The kernel-language front end and emitters: parse + check (nb_module_load_source, as `nabla
 * check`), then for a program that checks, every dump `nabla emit` offers: C and CUDA in primal,
 * forward and backward mode, and the IR (lowering, autodiff, the emitters). Compile errors are
 * expected results; crashes, sanitizer reports, leaks and hangs are findings. */
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > 64 * 1024) return 0; /* long programs only slow the search down */
    char *src = nb_fuzz_cstr(data, size);
    nb_module_options opts;
    memset(&opts, 0, sizeof opts);
    opts.no_disk_cache = 1;
    nb_module *m = NULL;
    nb_status s = nb_module_load_source(NULL, "fuzz.nb", src, &opts, &m);
    if (s == NB_OK) {
        static const nb_dump_format formats[] = {NB_DUMP_C, NB_DUMP_CUDA};
        static const nb_diff_mode modes[] = {NB_MODE_PRIMAL, NB_MODE_FWD, NB_MODE_BWD};
        for (size_t f = 0; f < sizeof formats / sizeof formats[0]; f++)
            for (size_t k = 0; k < sizeof modes / sizeof modes[0]; k++) {
                char *text = NULL;
                if (nb_module_dump(m, formats[f], NULL, modes[k], &text) == NB_OK && !text)
                    nb_fuzz_fail("nb_module_dump returned NB_OK without text", NULL);
                nb_module_free_text(text);
            }
        char *ir = NULL;
        nb_module_dump(m, NB_DUMP_IR, NULL, NB_MODE_PRIMAL, &ir);
        nb_module_free_text(ir);
        nb_module_free(m);
    } else {
        if (m) nb_fuzz_fail("nb_module_load_source failed but returned a module", NULL);
        if (!nb_last_error()[0]) nb_fuzz_fail("nb_module_load_source failed without a message", NULL);
    }
    free(src);
    return 0;
}
