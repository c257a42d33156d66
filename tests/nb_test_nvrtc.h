/* Compiling a bound call's CUDA kernel with NVRTC, no GPU needed (tests of .nb code that runs on
 * CUDA through the call layer):
 *   nb_call_begin(f, &c); ...bind as the library binds (arrays on the CPU)...;
 *   ok += nb_test_nvrtc_call(c, "what");        // 1 when it compiled; frees c
 *   ok += nb_test_nvrtc_call_ptx(c, "what", "st.global.v4"); // and its PTX contains that
 * The call is bound and its signature decided as a run decides it (derivative wrappers, owned
 * gradients, 4 contiguous indices per thread), then emitted for CUDA and compiled for
 * compute_90. A failure is a test failure naming `what` and the error. */
#ifndef NB_TEST_NVRTC_H
#define NB_TEST_NVRTC_H

#include "call/call_internal.h"
#include "core/strbuf.h"
#include "device/cuda/cuda_api.h"
#include "lang/compiler.h"
#include "nabla/alloc.h"
#include "nb_test.h"

static inline int nb_test_nvrtc_call_ptx(nb_call *c, const char *what, const char *want) {
    nb_status s = nb_call_ad_fuse(c, 0);
    if (!s) s = nb_call_bind(c, 0, NULL);
    if (!s) s = nb_call_materialize(c, 0);
    if (!s) nb_call_owned_grads(c); /* (as a run decides them: gradients one thread owns, */
    if (!s) nb_call_mark_contig4(c, 1); /* 4 contiguous indices per thread) */
    NB_EXPECT(s == NB_OK);
    if (s) {
        fprintf(stderr, "  %s: bind: %s\n", what, nb_last_error());
        nb_call_free(c);
        return 0;
    }
    nb_call_sig sig = c->sig;
    sig.target = NB_TARGET_CUDA;
    nb_strbuf src;
    nb_strbuf_init(&src);
    nb_call_layout lay;
    s = nb_program_emit_call(c->f->m->prog, &sig, &src, &lay);
    NB_EXPECT(s == NB_OK);
    void *img = NULL;
    size_t size = 0;
    int cubin = 0;
    if (!s) s = nb_nvrtc_compile(nb_strbuf_cstr(&src), "call.cu", "compute_90", NULL, &img, &size, &cubin);
    NB_EXPECT(s == NB_OK);
    if (s) fprintf(stderr, "  %s: %s\n", what, nb_last_error());
    if (!s && want && !cubin && !strstr((const char *)img, want)) {
        NB_EXPECT(strstr((const char *)img, want) != NULL);
        fprintf(stderr, "  %s: no %s in the PTX\n", what, want);
    }
    if (img) nb_free(img, size);
    nb_strbuf_free(&src);
    nb_call_free(c);
    return s == NB_OK;
}

static inline int nb_test_nvrtc_call(nb_call *c, const char *what) { return nb_test_nvrtc_call_ptx(c, what, NULL); }

#endif
