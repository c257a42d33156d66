/* Parameter views (op_rows.h: nb_tape_param_view): one parameter value over consecutive
 * parameters' memory. A linear through the view of two stacked weights must equal the two
 * linears, its gradients must land in the two parameters' slots of the gradient buffer, the
 * view adds no floats, and bad views are errors. CPU tape (CI). */
#include <math.h>
#include <string.h>

#include "nb_test.h"
#include "nabla/nn_tape.h"
#include "graph/op_rows.h"

static void test_view_linear(void) {
    nb_tape *t;
    NB_REQUIRE_OK(nb_tape_create(&t));
    nb_tvar wa, wb, ba, bb, w, b;
    NB_REQUIRE_OK(nb_tape_param(t, "a.w", 2, (int64_t[]){2, 3}, &wa));
    NB_REQUIRE_OK(nb_tape_param(t, "b.w", 2, (int64_t[]){4, 3}, &wb));
    NB_REQUIRE_OK(nb_tape_param(t, "a.b", 1, (int64_t[]){2}, &ba));
    NB_REQUIRE_OK(nb_tape_param(t, "b.b", 1, (int64_t[]){4}, &bb));
    NB_REQUIRE_OK(nb_tape_param_view(t, "~w", wa, 2, (int64_t[]){6, 3}, &w));
    NB_REQUIRE_OK(nb_tape_param_view(t, "~b", ba, 1, (int64_t[]){6}, &b));
    float *p;
    int64_t np;
    NB_REQUIRE_OK(nb_tape_params(t, &p, &np));
    NB_EXPECT(np == 6 * 3 + 6); /* the views own nothing */
    for (int64_t i = 0; i < np; i++) p[i] = (float)sin(0.7 * (double)i);
    float x[2 * 3] = {1, -2, 0.5f, 3, 0.25f, -1};
    nb_tvar xv, y, l, tg;
    NB_REQUIRE_OK(nb_tape_input(t, 2, (int64_t[]){2, 3}, x, 0, &xv));
    NB_REQUIRE_OK(nb_tape_linear(t, xv, w, b, &y));
    float ys[12], z[12] = {0};
    NB_REQUIRE_OK(nb_tape_read(t, y, ys, 12));
    int bad = 0; /* y[n][o] = sum_k x[n][k] W[o][k] + b[o] with W, b the stacked parameters */
    for (int n = 0; n < 2; n++)
        for (int o = 0; o < 6; o++) {
            double acc = p[18 + o];
            for (int k = 0; k < 3; k++) acc += x[n * 3 + k] * p[o * 3 + k];
            bad += fabs(ys[n * 6 + o] - acc) > 1e-5;
        }
    NB_EXPECT(bad == 0);
    NB_REQUIRE_OK(nb_tape_input(t, 2, (int64_t[]){2, 6}, z, 0, &tg));
    NB_REQUIRE_OK(nb_tape_mse(t, y, tg, &l));
    NB_REQUIRE_OK(nb_tape_backward(t, l));
    float *g, *gb_;
    int64_t ng;
    NB_REQUIRE_OK(nb_tape_grads(t, &g, &ng));
    NB_REQUIRE_OK(nb_tape_grad(t, wb, &gb_, NULL));
    NB_EXPECT(gb_ == g + 6); /* b.w's gradient is rows 2..5 of the view's */
    bad = 0; /* dW[o][k] = sum_n 2 y[n][o] / 12 * x[n][k]; db[o] = sum_n 2 y[n][o] / 12 */
    for (int o = 0; o < 6; o++) {
        double db = 0;
        for (int n = 0; n < 2; n++) db += 2.0 * ys[n * 6 + o] / 12.0;
        bad += fabs(g[18 + o] - db) > 1e-5;
        for (int k = 0; k < 3; k++) {
            double dw = 0;
            for (int n = 0; n < 2; n++) dw += 2.0 * ys[n * 6 + o] / 12.0 * x[n * 3 + k];
            bad += fabs(g[o * 3 + k] - dw) > 1e-5;
        }
    }
    NB_EXPECT(bad == 0);
    nb_tape_free(t);
}

static void test_view_errors(void) {
    nb_tape *t;
    NB_REQUIRE_OK(nb_tape_create(&t));
    nb_tvar w, v;
    NB_REQUIRE_OK(nb_tape_param(t, "w", 2, (int64_t[]){2, 3}, &w));
    NB_EXPECT_ERR(nb_tape_param_view(t, "v", w, 2, (int64_t[]){3, 3}, &v), NB_ERR_SHAPE, "run past");
    NB_EXPECT_ERR(nb_tape_param_view(t, "v", 7, 1, (int64_t[]){1}, &v), NB_ERR_INVALID_ARG,
                  "not a parameter");
    NB_EXPECT_ERR(nb_tape_param_view(t, "w", w, 1, (int64_t[]){6}, &v), NB_ERR_INVALID_ARG,
                  "already registered");
    NB_EXPECT_ERR(nb_tape_param_view(t, "v", w, 0, NULL, &v), NB_ERR_SHAPE, "");
    float x[6] = {0};
    nb_tvar xv;
    NB_REQUIRE_OK(nb_tape_input(t, 1, (int64_t[]){6}, x, 0, &xv));
    NB_EXPECT_ERR(nb_tape_param_view(t, "v", xv, 1, (int64_t[]){6}, &v), NB_ERR_INVALID_ARG,
                  "not a parameter");
    NB_EXPECT_ERR(nb_tape_param_view(t, "v2", w, 1, (int64_t[]){6}, &v), NB_ERR_INVALID_ARG,
                  "after the first step");
    nb_tape_free(t);
}

int main(int argc, char **argv) {
    NB_TEST_MAIN(argc, argv, test_view_linear, test_view_errors);
}
