/* The tape's .nb rows (graph/tape_nbrows.c, nb_tape_nb_unary): lib/nn_ops.nb functions over tape
 * memory through cached prepared calls. The helper is device-generic, so its logic is tested on a
 * host tape here (the CUDA silu row is its only user; test_nn_tape_cuda / test_ops check that row
 * against the CPU on a GPU): values equal a plain call of nn_silu (f32 and bf16 storage), one
 * prepared call per (count, dtypes, alignment) reused across launches, no allocation once warm,
 * the oldest evicted past the cache's size, bad arguments are typed errors. */
#include <string.h>

#include "graph/tape_internal.h"
#include "nabla/module.h"
#include "nb_test.h"
#include "nb_test_alloc.h"

/* y = nn_silu(x) by a plain call over host arrays of dtype dt (the reference). */
static void ref_silu(nb_device *dev, nb_dtype dt, const void *x, void *y, int64_t n) {
    nb_module *m = NULL;
    nb_func *f = NULL;
    nb_tensor *tx = NULL, *ty = NULL;
    NB_REQUIRE_OK(nb_module_load_source(dev, "ref.nb", "import nn_ops;\n", NULL, &m));
    NB_REQUIRE_OK(nb_module_func(m, "nn_silu", &f));
    NB_REQUIRE_OK(nb_tensor_wrap(dev, dt, 1, &n, NULL, (void *)x, &tx));
    NB_REQUIRE_OK(nb_tensor_wrap(dev, dt, 1, &n, NULL, y, &ty));
    nb_call *c = NULL;
    NB_REQUIRE_OK(nb_call_begin(f, &c));
    nb_call_arg(c, 0, tx);
    nb_call_result(c, ty);
    NB_EXPECT_OK(nb_call_run(c, NULL));
    nb_tensor_free(tx), nb_tensor_free(ty);
    nb_module_free(m);
}

static void test_silu_host_tape(void) {
    nb_tape *t = NULL;
    NB_REQUIRE_OK(nb_tape_create(&t));
    nb_device *dev = nb_tape_device(t);
    NB_REQUIRE_OK(dev ? NB_OK : NB_ERR_INTERNAL);
    enum { N = 10007 };
    static float x[N + 4], y[N + 4], r[N + 4];
    for (int i = 0; i < N + 4; i++) x[i] = -6.0f + 12.0f * (float)((i * 53) % 97) / 97.0f;
    ref_silu(dev, NB_F32, x, r, N);
    NB_EXPECT_OK(nb_tape_nb_unary(t, NB_TNB_SILU, x, NB_F32, y, NB_F32, N));
    NB_EXPECT(!memcmp(y, r, sizeof(float) * N));
    NB_EXPECT(t->n_preps == 1);
    /* the same kind again: the cached call; other pointers of the same alignment too */
    static float x2[N], y2[N];
    memcpy(x2, x + 4, sizeof x2);
    NB_EXPECT_OK(nb_tape_nb_unary(t, NB_TNB_SILU, x2, NB_F32, y2, NB_F32, N));
    ref_silu(dev, NB_F32, x + 4, r, N);
    NB_EXPECT(!memcmp(y2, r, sizeof(float) * N));
    /* (static float arrays: the alignment class of x + 1 differs from x's when x is 16-aligned) */
    int32_t before = t->n_preps;
    NB_EXPECT_OK(nb_tape_nb_unary(t, NB_TNB_SILU, x + 1, NB_F32, y + 1, NB_F32, N));
    NB_EXPECT(t->n_preps == before + (((uintptr_t)x % 16 == 0 && (uintptr_t)y % 16 == 0) ? 1 : 0));
    ref_silu(dev, NB_F32, x + 1, r, N);
    NB_EXPECT(!memcmp(y + 1, r, sizeof(float) * N));

    /* warm: launches allocate nothing */
    nb_test_count_allocs_begin();
    for (int i = 0; i < 10; i++) NB_EXPECT_OK(nb_tape_nb_unary(t, NB_TNB_SILU, i % 2 ? x : x2, NB_F32, y, NB_F32, N));
    nb_test_count_allocs_end();
    NB_EXPECT(nb_test_allocs == 0);

    /* bf16 in, f32 out and bf16 out: the call reads and writes each array in its dtype */
    static uint16_t xb[N], yb[N], rb[N];
    for (int i = 0; i < N; i++) xb[i] = nb_f32_to_bf16(x[i]);
    ref_silu(dev, NB_BF16, xb, rb, N);
    NB_EXPECT_OK(nb_tape_nb_unary(t, NB_TNB_SILU, xb, NB_BF16, yb, NB_BF16, N));
    NB_EXPECT(!memcmp(yb, rb, sizeof(uint16_t) * N));
    NB_EXPECT_OK(nb_tape_nb_unary(t, NB_TNB_SILU, xb, NB_BF16, y, NB_F32, N));
    int bad = 0;
    for (int i = 0; i < N; i++) bad += fabsf(y[i] - nb_bf16_to_f32(rb[i])) > 0.01f * (1.0f + fabsf(y[i]));
    NB_EXPECT(bad == 0);

    /* many counts: the cache keeps the newest 64 */
    for (int k = 1; k <= 70; k++) NB_EXPECT_OK(nb_tape_nb_unary(t, NB_TNB_SILU, x, NB_F32, y, NB_F32, k));
    NB_EXPECT(t->n_preps == 64);
    NB_EXPECT(t->preps != NULL);
    ref_silu(dev, NB_F32, x, r, 70);
    NB_EXPECT(!memcmp(y, r, sizeof(float) * 70));

    /* nothing to do; bad arguments */
    NB_EXPECT_OK(nb_tape_nb_unary(t, NB_TNB_SILU, x, NB_F32, y, NB_F32, 0));
    NB_EXPECT_ERR(nb_tape_nb_unary(t, NB_TNB_COUNT, x, NB_F32, y, NB_F32, 4), NB_ERR_INTERNAL, ".nb row");
    NB_EXPECT_ERR(nb_tape_nb_unary(t, NB_TNB_SILU, x, NB_F32, y, NB_F32, (int64_t)1 << 31), NB_ERR_INTERNAL, "elements");
    NB_EXPECT_ERR(nb_tape_nb_unary(t, NB_TNB_SILU, NULL, NB_F32, y, NB_F32, 8), NB_ERR_INVALID_ARG, "NULL");
    nb_tape_free(t); /* frees the prepared calls and the module (LeakSanitizer in the ASan build) */
}

int main(int argc, char **argv) { NB_TEST_MAIN(argc, argv, test_silu_host_tape); }
