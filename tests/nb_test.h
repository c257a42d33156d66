/* Minimal test harness for nabla's C tests (one executable per area, run by CTest).
 *
 *   static void test_x(void) { NB_EXPECT(1 + 1 == 2); NB_EXPECT_OK(nb_foo()); }
 *   int main(int argc, char **argv) { NB_TEST_MAIN(argc, argv, test_x, test_y); }
 *
 * A test may call NB_SKIP("why") (e.g. no GPU). An executable whose every test skipped exits
 * 77, which CTest reports as skipped. With NB_REQUIRE_CUDA=1 in the environment a skip is a
 * failure, so a GPU machine cannot silently skip its CUDA tests.
 */
#ifndef NB_TEST_H
#define NB_TEST_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nabla/nabla.h"

typedef void (*nb_test_fn)(void);

static int nb_test_failures_;   /* failed checks in the current test */
static int nb_test_skipped_;    /* current test called NB_SKIP */
static const char *nb_test_name_;

#define NB_EXPECT(cond)                                                                        \
    do {                                                                                       \
        if (!(cond)) {                                                                         \
            fprintf(stderr, "  %s:%d: %s: expected %s\n", __FILE__, __LINE__, nb_test_name_,   \
                    #cond);                                                                    \
            nb_test_failures_++;                                                               \
        }                                                                                      \
    } while (0)

#define NB_EXPECT_OK(expr)                                                                     \
    do {                                                                                       \
        nb_status nb_s_ = (expr);                                                              \
        if (nb_s_ != NB_OK) {                                                                  \
            fprintf(stderr, "  %s:%d: %s: %s failed: %s: %s\n", __FILE__, __LINE__,            \
                    nb_test_name_, #expr, nb_status_name(nb_s_), nb_last_error());             \
            nb_test_failures_++;                                                               \
        }                                                                                      \
    } while (0)

/* Asserts OK and stops the test on failure (for setup steps later checks depend on). */
#define NB_REQUIRE_OK(expr)                                                                    \
    do {                                                                                       \
        nb_status nb_s_ = (expr);                                                              \
        if (nb_s_ != NB_OK) {                                                                  \
            fprintf(stderr, "  %s:%d: %s: %s failed: %s: %s\n", __FILE__, __LINE__,            \
                    nb_test_name_, #expr, nb_status_name(nb_s_), nb_last_error());             \
            nb_test_failures_++;                                                               \
            return;                                                                            \
        }                                                                                      \
    } while (0)

/* Expects status `code` and an error message containing `substr`. */
#define NB_EXPECT_ERR(expr, code, substr)                                                      \
    do {                                                                                       \
        nb_status nb_s_ = (expr);                                                              \
        if (nb_s_ != (code)) {                                                                 \
            fprintf(stderr, "  %s:%d: %s: %s returned %s, expected %s (%s)\n", __FILE__,       \
                    __LINE__, nb_test_name_, #expr, nb_status_name(nb_s_),                     \
                    nb_status_name(code), nb_last_error());                                    \
            nb_test_failures_++;                                                               \
        } else if (!strstr(nb_last_error(), (substr))) {                                       \
            fprintf(stderr, "  %s:%d: %s: message \"%s\" lacks \"%s\"\n", __FILE__, __LINE__,  \
                    nb_test_name_, nb_last_error(), (substr));                                 \
            nb_test_failures_++;                                                               \
        }                                                                                      \
    } while (0)

#define NB_EXPECT_NEAR(a, b, tol)                                                              \
    do {                                                                                       \
        double nb_a_ = (double)(a), nb_b_ = (double)(b);                                       \
        if (!(fabs(nb_a_ - nb_b_) <= (tol))) {                                                 \
            fprintf(stderr, "  %s:%d: %s: %s = %.9g, expected %.9g (tol %g)\n", __FILE__,      \
                    __LINE__, nb_test_name_, #a, nb_a_, nb_b_, (double)(tol));                 \
            nb_test_failures_++;                                                               \
        }                                                                                      \
    } while (0)

/* n values uniform in [-scale, scale) from a linear congruential sequence started at seed
 * (deterministic across platforms). */
static inline void nb_test_fill(float *p, int64_t n, uint32_t seed, float scale) {
    for (int64_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        p[i] = scale * ((float)(seed >> 8) / 16777216.0f * 2.0f - 1.0f);
    }
}

/* Elementwise closeness of float arrays: max |a - b| / (1 + |b|) over n values <= tol, else a
 * failure naming `what`, the worst index and both values. */
static inline void nb_test_expect_close(const char *what, const float *a, const float *b, int64_t n, double tol) {
    double worst = 0.0;
    int64_t at = 0;
    for (int64_t i = 0; i < n; i++) {
        double e = fabs((double)a[i] - (double)b[i]) / (1.0 + fabs((double)b[i]));
        if (!(e <= worst)) worst = e, at = i;
    }
    if (!(worst <= tol)) {
        fprintf(stderr, "  %s: %s differs: [%lld] %.9g vs %.9g (err %.3g > %.3g)\n", nb_test_name_, what,
                (long long)at, (double)a[at], (double)b[at], worst, tol);
        nb_test_failures_++;
    }
}

#define NB_SKIP(why)                                                                           \
    do {                                                                                       \
        fprintf(stderr, "  %s: skipped: %s\n", nb_test_name_, (why));                          \
        nb_test_skipped_ = 1;                                                                  \
        return;                                                                                \
    } while (0)

static inline int nb_test_run_(int argc, char **argv, const char *names, nb_test_fn *fns, int n) {
    const char *filter = argc > 1 ? argv[1] : NULL;
    const char *req = getenv("NB_REQUIRE_CUDA");
    int require = req && req[0] && strcmp(req, "0") != 0;
    int passed = 0, failed = 0, skipped = 0;
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", names);
    char *save = NULL;
    char *name = strtok_r(buf, ", ", &save);
    for (int i = 0; i < n && name; i++, name = strtok_r(NULL, ", ", &save)) {
        if (filter && !strstr(name, filter)) continue;
        nb_test_name_ = name;
        nb_test_failures_ = 0;
        nb_test_skipped_ = 0;
        nb_clear_error();
        fns[i]();
        if (nb_test_failures_) {
            failed++;
            printf("FAIL %s\n", name);
        } else if (nb_test_skipped_) {
            if (require) {
                failed++;
                printf("FAIL %s (skipped, but NB_REQUIRE_CUDA is set)\n", name);
            } else {
                skipped++;
                printf("SKIP %s\n", name);
            }
        } else {
            passed++;
            printf("ok   %s\n", name);
        }
    }
    printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
    if (failed) return 1;
    if (skipped && !passed) return 77;
    return 0;
}

#define NB_TEST_MAIN(argc, argv, ...)                                                          \
    do {                                                                                       \
        nb_test_fn nb_fns_[] = {__VA_ARGS__};                                                  \
        return nb_test_run_((argc), (argv), #__VA_ARGS__, nb_fns_,                             \
                            (int)(sizeof nb_fns_ / sizeof nb_fns_[0]));                        \
    } while (0)

#endif
