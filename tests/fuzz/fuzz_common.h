/* Shared by the libFuzzer harnesses in tests/fuzz (fuzz_*.c): each defines LLVMFuzzerTestOneInput
 * and is linked either with libFuzzer (`make fuzz`, clang, -fsanitize=fuzzer) or with
 * fuzz_replay.c's main(), which feeds it the seed corpus and the regressions in the normal test
 * suite (gcc, no libFuzzer). */
#ifndef NB_FUZZ_COMMON_H
#define NB_FUZZ_COMMON_H

#include <stddef.h>
#include <stdint.h>

#include "nabla/nabla.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Writes data to `name` in a private scratch directory (created on first use, removed at exit)
 * and returns its path; aborts when the scratch directory cannot be written (not a finding). */
const char *nb_fuzz_write_file(const char *name, const uint8_t *data, size_t size);
/* Removes `name` from the scratch directory if it is there. */
void nb_fuzz_remove_file(const char *name);
/* The scratch directory. */
const char *nb_fuzz_dir(void);
/* One CPU device for the whole run (opened on first use; never closed, so no per-input cost). */
nb_device *nb_fuzz_cpu(void);
/* data as a fresh NUL-terminated string (free it); aborts on out of memory. */
char *nb_fuzz_cstr(const uint8_t *data, size_t size);
/* Aborts with a message: an invariant the harness checks does not hold (a finding). */
void nb_fuzz_fail(const char *what, const char *detail);

#endif
