/* Autodiff against central finite differences (double precision, random inputs from a fixed seed so
 * that CI is reproducible; NB_AD_SEED=N explores others, NB_AD_SEED=time a fresh one each run):
 * for every intrinsic with a derivative rule and every supported construct, a function
 * f(x, y, z) -> double is differentiated in forward mode (fwd_diff, a random direction v) and in
 * reverse mode (bwd_diff, a random output weight w). Checks, per random point:
 *   fwd:  J v            == (f(p + h v) - f(p - h v)) / 2h
 *   bwd:  J^T w (each i) == w (f(p + h e_i) - f(p - h e_i)) / 2h
 *   and   <J v, w>       == <v, J^T w>   (forward and reverse mode agree)
 * Runs on the CPU and, when a GPU is present, on CUDA (skipped otherwise). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "jit/jit.h"
#include "lang/compiler.h"
#include "nabla/module.h"
#include "nb_test.h"

typedef struct ad_case {
    const char *name;
    const char *body; /* body of `double NAME(double x, double y, double z)` */
} ad_case;

/* helpers shared by the cases */
static const char *PRELUDE =
    "struct S : IDifferentiable { double a; double3 v; int k; };\n"
    "[Differentiable] double sq(double t) { return t * t; }\n"
    "[Differentiable] void split2(double t, out double a, out double b) { a = sin(t); b = t * t; }\n"
    "[Differentiable] void scale_io(inout double t, double s) { t = t * s + t; }\n"
    "[Differentiable] S mk(double a, double b) { S s; s.a = a * b; s.v = double3(a, b, a + b); s.k = 3; return s; }\n"
    "double plain(double t) { return t * 2.0; }\n"
    "[Differentiable] double chain3(double t) { return sq(sin(t)) + sq(t); }\n"
    "double mycube(double t) { return t * t * t; }\n"
    "DifferentialPair<double> mycube_fwd(DifferentialPair<double> t) {\n"
    "    return diffPair(t.p * t.p * t.p, 3.0 * t.p * t.p * t.d); }\n"
    "void mycube_bwd(inout DifferentialPair<double> t, double g) {\n"
    "    t = diffPair(t.p, 3.0 * t.p * t.p * g); }\n"
    "[ForwardDerivative(mycube_fwd)] [BackwardDerivative(mycube_bwd)]\n"
    "double cube(double t) { return mycube(t); }\n"
    "struct M : IDifferentiable { double a; double2 b; int n;\n"
    "    [Differentiable] double eval(double t) { return a * t * t + b.x * sin(t) + lin(t); }\n"
    "    [Differentiable] double lin(double t) { return b.y * t + double(n); }\n"
    "    [Differentiable] [mutating] void scale(double k) { a = a * k; b = b * k; }\n"
    "    [Differentiable] M twice() { M r = this; r.a = a * 2.0 + b.y; return r; }\n"
    "};\n"
    "[Differentiable] M mkm(double a, double b) { M m; m.a = a; m.b = double2(b, a * b); m.n = 2; return m; }\n";

static const ad_case CASES[] = {
    /* intrinsics (x, y, z in [0.2, 0.9]) */
    {"i_exp", "return exp(x) * y;"},
    {"i_exp2", "return exp2(x * y);"},
    {"i_log", "return log(x + y);"},
    {"i_log2", "return log2(x * z);"},
    {"i_log10", "return log10(x + 1.0);"},
    {"i_sqrt", "return sqrt(x * y);"},
    {"i_rsqrt", "return rsqrt(x + z);"},
    {"i_rcp", "return rcp(x + y);"},
    {"i_sin", "return sin(x * 3.0) * y;"},
    {"i_cos", "return cos(x * y);"},
    {"i_tan", "return tan(x);"},
    {"i_asin", "return asin(x * 0.9);"},
    {"i_acos", "return acos(y * 0.9) * x;"},
    {"i_atan", "return atan(x * 2.0 - y);"},
    {"i_sinh", "return sinh(x * y);"},
    {"i_cosh", "return cosh(x - y);"},
    {"i_tanh", "return tanh(2.0 * x - z);"},
    {"i_frac", "return frac(x + 1.3) * y;"},
    {"i_saturate", "return saturate(x) * y;"},
    {"i_radians", "return radians(x * 100.0);"},
    {"i_degrees", "return degrees(x);"},
    {"i_abs", "return abs(x - 1.5) * y;"},
    {"i_min", "return min(x, y) + min(y * 2.0, z);"},
    {"i_max", "return max(x, y) * z;"},
    {"i_clamp", "return clamp(x, 0.1, 0.95) + clamp(y, z - 0.01, z + 0.01) + clamp(x * 5.0, y, z);"},
    {"i_pow", "return pow(x, y) + pow(z, 2.0);"},
    {"i_atan2", "return atan2(x + 0.1, y - 0.4) + atan2(y, x);"},
    {"i_fmod", "return fmod(x * 7.0, y + 0.3);"},
    {"i_lerp", "return lerp(x, y, z);"},
    {"i_smoothstep", "return smoothstep(0.0, 1.0, x) + smoothstep(y * 0.1, z + 1.0, x);"},
    {"i_mad", "return mad(x, y, z) + fma(y, z, x);"},
    {"i_zero", "return floor(x * 10.0) * y + ceil(z) * x + step(0.5, y) + sign(x) * z + round(x) + trunc(y);"},
    {"i_dot", "return dot(double3(x, y, z), double3(z, x * x, y));"},
    {"i_cross", "double3 c = cross(double3(x, y, z), double3(z, x, y * y)); return c.x + 2.0 * c.y + 3.0 * c.z;"},
    {"i_length", "return length(double3(x, y, z)) + length(double2(x, y)) + length(x - 1.0);"},
    {"i_distance", "return distance(double3(x, y, z), double3(z, 1.0, x));"},
    {"i_normalize", "double3 n = normalize(double3(x, y - 1.0, z)); return n.x + 2.0 * n.y - n.z;"},
    {"i_reflect", "double3 r = reflect(double3(x, y, z), normalize(double3(z, 1.0, x))); return r.x * 3.0 + r.y - r.z;"},
    {"i_select", "return select(x > y, x * z, y * y) + (x > z ? x : z * y);"},
    {"i_mul_mv", "double2x2 m = double2x2(x, y, z, x * y); double2 v = mul(m, double2(z, 1.0)); double2 w = mul(double2(y, x), m); return v.x + 2.0 * v.y + w.x * w.y;"},
    {"i_mul_mm", "double2x2 a = double2x2(x, y, z, 1.0); double2x2 b = double2x2(y, x * z, 0.5, z); double2x2 c = mul(a, b); return c[0][0] + 2.0 * c[0][1] + 3.0 * c[1][0] + c[1][1] * c[1][1];"},
    {"i_mul_s", "double3 v = mul(x, double3(y, z, 1.0)); return v.x + v.y * v.z;"},
    {"i_transpose", "double2x3 a = double2x3(x, y, z, x * y, 1.0, z * z); double3x2 t = transpose(a); return t[0][1] + 2.0 * t[2][0] + t[1][1] * t[2][1];"},
    {"i_det2", "return determinant(double2x2(x, y, z, x * z));"},
    {"i_det3", "return determinant(double3x3(x, y, z, 1.0, x * y, 0.3, z, 0.2, y * y));"},
    {"i_det4", "return determinant(double4x4(x, y, z, 1.0, 0.1, x * y, 0.3, z, z, 0.2, y * y, 0.5, 0.7, x, 0.4, y));"},
    /* constructs */
    {"c_arith", "return (x * y - z) / (x + 1.0) + -x * 2.0 + fmod(x, 0.3) + x % 0.25;"},
    {"c_if", "double r; if (x > y) { r = x * z; } else { r = sin(y) * x; } return r * r;"},
    {"c_ternary", "return x > 0.5 ? x * y : (y > 0.5 ? exp(z) : z * z);"},
    {"c_switch", "int k = int(x * 3.0); double r = 0.0; switch (k) { case 0: r = x * y; break; case 1: r = y * z; break; default: r = z * x * x; break; } return r + x;"},
    {"c_early_return", "if (x > 0.6) return x * y; double t = y * z; if (t > 0.3) { return t * x; } return t + x;"},
    {"c_nested_return", "double a = x; if (y > 0.4) { a = a * y; if (z > 0.5) return a * z; a = a + z; } return a * a;"},
    {"c_for", "double s = 0.0; for (int i = 0; i < 4; i++) { s = s * x + y * double(i); } return s + z;"},
    {"c_maxiters", "double s = x; int i = 0; [MaxIters(8)] while (i < int(y * 10.0)) { s = sin(s) + z; i++; } return s;"},
    {"c_nested_loops", "double s = 0.0; for (int i = 0; i < 3; i++) { double t = x; for (int j = 0; j < 2; j++) { t = t * y + z; } s = s + t * double(i + 1); } return s;"},
    {"c_vectors", "double3 v = double3(x, y, z); v.xy = v.yx * 2.0; v.z += v.x; double2 w = v.zy; return dot(v, v) + w.x * w.y;"},
    {"c_arrays", "double a[3] = {x, y, z}; for (int i = 0; i < 3; i++) a[i] = a[i] * a[(i + 1) % 3]; return a[0] + 2.0 * a[1] + 3.0 * a[2];"},
    {"c_array_dyn", "double a[4] = {x, y, z, x * y}; int k = int(z * 3.9); return a[k] * x + a[(k + 1) % 4];"},
    {"c_matrix_index", "double3x3 m = double3x3(x, y, z, y, z, x, z, x, y); m[1] = m[1] * x; m[2][0] = y * y; return m[0][1] + m[1][2] * m[2][0] + m[1][1];"},
    {"c_struct", "S s = mk(x, y); s.v.y = s.v.y * z; return s.a + s.v.x * s.v.y + s.v.z + double(s.k);"},
    {"c_call", "return sq(x) * y + sq(y * z);"},
    {"c_call_chain", "return chain3(x) + chain3(y * z);"},
    {"c_out_call", "double a, b; split2(x * y, a, b); return a + b * z;"},
    {"c_inout_call", "double t = x; scale_io(t, y); scale_io(t, z); return t;"},
    {"c_custom", "return cube(x) + cube(y * z);"},
    {"c_local_reassign", "double a = x; a = a * y; a = a + z; a = a * a; double b = a; b = b * x; return b;"},
    {"c_break", "double s = x; for (int i = 0; i < 10; i++) { s = s * y + z; if (s > 2.0) break; s = sin(s) + x; } return s;"},
    {"c_continue", "double s = 0.0; for (int i = 0; i < 6; i++) { double t = x * double(i); if (t > 1.5) continue; s = s + t * y; } return s * z;"},
    {"c_break_nested", "double s = 0.0; for (int i = 0; i < 3; i++) { double t = y; int j = 0; [MaxIters(6)] while (j < 6) { t = t * (x + 0.8) + 0.1; j++; if (t > z + 1.0) break; } s = s + t * double(i + 1); } return s;"},
    {"c_switch_in_loop", "double s = x; for (int i = 0; i < 4; i++) { switch (i % 3) { case 0: s = s * y; break; case 1: if (s > 0.3) continue; s = s + z; break; default: s = exp(-s); break; } s = s + 0.1 * x; } return s;"},
    {"c_method", "M m = mkm(x, y); return m.eval(z) + m.eval(x * y);"},
    {"c_method_mutating", "M m = mkm(x, y); double r = m.eval(z); m.scale(z); m.scale(x); return r + m.eval(y) + m.a;"},
    {"c_method_loop", "M m = mkm(x, z); double s = 0.0; for (int i = 0; i < 3; i++) { s = s + m.eval(y); m.scale(y); } return s;"},
    {"c_method_struct_ret", "M m = mkm(y, z).twice(); return m.twice().eval(x) * m.b.y;"},
    {"c_loop_return", "double s = x; for (int i = 0; i < 8; i++) { s = s * y + z; if (s > 1.5) return s * x; s = sin(s) + 0.5; } return s * z;"},
    {"c_loop_return_nested", "double s = 0.0; for (int i = 0; i < 3; i++) { double t = y; int j = 0; [MaxIters(5)] while (j < 5) { t = t * (x + 0.7) + z; j++; if (t > 2.5) return s + t * x; if (t > 1.8) break; } s = s + t * double(i + 1); } return s * y;"},
    {"c_loop_return_switch", "double s = x; for (int i = 0; i < 6; i++) { switch (i % 2) { case 0: s = s * (y + 0.6); break; default: if (s > 1.2) return s * s; s = s + z; break; } s = s + 0.1 * z; } return s;"},
    {"c_loop_return_first", "double s = y; for (int i = 0; i < 4; i++) { s = exp(s * x); return s + z; } return 0.0;"},
    {"c_int_mix", "int n = int(y * 4.0) + 1; double s = 0.0; for (int i = 0; i < 5; i++) { if (i < n) s = s + x * double(i); } return s * z;"},
};
#define NCASES ((int)(sizeof CASES / sizeof CASES[0]))

static char *build_source(void)
{
    size_t cap = 1 << 16, n = 0;
    char *s = malloc(cap);
    n += (size_t)snprintf(s + n, cap - n, "%s", PRELUDE);
    for (int i = 0; i < NCASES; i++) {
        const char *k = CASES[i].name;
        size_t need = strlen(CASES[i].body) + 1024;
        if (n + need > cap) {
            cap = (cap + need) * 2;
            s = realloc(s, cap);
        }
        n += (size_t)snprintf(s + n, cap - n,
                              "[Differentiable] double %s(double x, double y, double z) { %s }\n"
                              "double fd_%s(double x, double y, double z, double3 v) {\n"
                              "    return fwd_diff(%s)(diffPair(x, v.x), diffPair(y, v.y), diffPair(z, v.z)).d; }\n"
                              "double3 bd_%s(double x, double y, double z, double w) {\n"
                              "    DifferentialPair<double> px = diffPair(x, 0.5), py = diffPair(y), pz = diffPair(z);\n"
                              "    bwd_diff(%s)(px, py, pz, w);\n"
                              "    return double3(px.d, py.d, pz.d); }\n" /* (Slang: the 0.5 is ignored, .d is set) */,
                              k, CASES[i].body, k, k, k, k);
    }
    return s;
}

#define NPTS 24

static nb_tensor *vec(nb_device *dev, const double *d, int n, int cols)
{
    nb_tensor *t = NULL;
    int64_t shape[2] = {n, cols};
    if (nb_tensor_from_host(dev, NB_F64, cols > 1 ? 2 : 1, shape, d, &t) != NB_OK) return NULL;
    return t;
}

/* calls fn over the points; out gets n * cols doubles */
static int run(nb_module *m, const char *fn, nb_device *dev, const double *x, const double *y, const double *z,
               const double *extra, int extra_cols, double *out, int cols)
{
    nb_func *f = NULL;
    if (nb_module_func(m, fn, &f) != NB_OK) return 0;
    nb_call *c = NULL;
    if (nb_call_begin(f, &c) != NB_OK) return 0;
    nb_tensor *t[4] = {vec(dev, x, NPTS, 1), vec(dev, y, NPTS, 1), vec(dev, z, NPTS, 1),
                       extra ? vec(dev, extra, NPTS, extra_cols) : NULL};
    int ok = 1;
    for (int i = 0; i < (extra ? 4 : 3); i++) ok = ok && t[i] && nb_call_arg(c, i, t[i]) == NB_OK;
    nb_tensor *r = NULL;
    if (ok) ok = nb_call_run(c, &r) == NB_OK; /* (frees c) */
    else nb_call_free(c);
    ok = ok && nb_tensor_to_host(r, out, sizeof(double) * NPTS * (size_t)cols) == NB_OK;
    if (!ok) fprintf(stderr, "  %s: %s\n", fn, nb_last_error());
    for (int i = 0; i < 4; i++) nb_tensor_free(t[i]);
    nb_tensor_free(r);
    return ok;
}

static double urand(void) { return (double)rand() / RAND_MAX; }

/* The seed of a check: fixed (20261127 + k) unless NB_AD_SEED names one or says "time". */
static unsigned ad_seed(unsigned k)
{
    const char *e = getenv("NB_AD_SEED");
    if (e && strcmp(e, "time") == 0) return (unsigned)time(NULL) + k;
    if (e && *e) return (unsigned)atoi(e) + k;
    return 20261127u + k;
}

static void check_device(nb_device *dev)
{
    unsigned seed = ad_seed(0);
    srand(seed);
    char *src = build_source();
    nb_module *m = NULL;
    nb_status st = nb_module_load_source(dev, "ad_fd.nb", src, NULL, &m);
    free(src);
    if (st != NB_OK) {
        fprintf(stderr, "  %s\n", nb_last_error());
        NB_REQUIRE_OK(st);
    }
    const double h = 1e-6;
    for (int ci = 0; ci < NCASES; ci++) {
        const char *k = CASES[ci].name;
        double X[NPTS], Y[NPTS], Z[NPTS], V[NPTS * 3], W[NPTS];
        for (int i = 0; i < NPTS; i++) {
            X[i] = 0.2 + 0.7 * urand();
            Y[i] = 0.2 + 0.7 * urand();
            Z[i] = 0.2 + 0.7 * urand();
            for (int j = 0; j < 3; j++) V[i * 3 + j] = 2.0 * urand() - 1.0;
            W[i] = 2.0 * urand() - 1.0;
        }
        double jv[NPTS], jtw[NPTS * 3], fp[3][NPTS], fm[3][NPTS], vp[NPTS], vm[NPTS];
        char fd[64], bd[64];
        snprintf(fd, sizeof fd, "fd_%s", k);
        snprintf(bd, sizeof bd, "bd_%s", k);
        int ok = run(m, fd, dev, X, Y, Z, V, 3, jv, 1) && run(m, bd, dev, X, Y, Z, W, 1, jtw, 3);
        /* finite differences: along v, and along each axis */
        double Xp[NPTS], Yp[NPTS], Zp[NPTS], Xm[NPTS], Ym[NPTS], Zm[NPTS];
        for (int i = 0; i < NPTS; i++) {
            Xp[i] = X[i] + h * V[i * 3];
            Yp[i] = Y[i] + h * V[i * 3 + 1];
            Zp[i] = Z[i] + h * V[i * 3 + 2];
            Xm[i] = X[i] - h * V[i * 3];
            Ym[i] = Y[i] - h * V[i * 3 + 1];
            Zm[i] = Z[i] - h * V[i * 3 + 2];
        }
        ok = ok && run(m, k, dev, Xp, Yp, Zp, NULL, 0, vp, 1) && run(m, k, dev, Xm, Ym, Zm, NULL, 0, vm, 1);
        for (int a = 0; a < 3 && ok; a++) {
            double P[3][NPTS], M[3][NPTS];
            for (int i = 0; i < NPTS; i++) {
                P[0][i] = M[0][i] = X[i];
                P[1][i] = M[1][i] = Y[i];
                P[2][i] = M[2][i] = Z[i];
                P[a][i] += h;
                M[a][i] -= h;
            }
            ok = run(m, k, dev, P[0], P[1], P[2], NULL, 0, fp[a], 1) && run(m, k, dev, M[0], M[1], M[2], NULL, 0, fm[a], 1);
        }
        if (!ok) {
            fprintf(stderr, "  case %s: call failed\n", k);
            nb_test_failures_++;
            continue;
        }
        int bad = 0;
        for (int i = 0; i < NPTS && bad < 3; i++) {
            double fdv = (vp[i] - vm[i]) / (2 * h);
            double tol = 1e-5 * (1 + fabs(fdv));
            if (!(fabs(jv[i] - fdv) <= tol)) {
                fprintf(stderr, "  case %s (seed %u) point %d (%.6f %.6f %.6f): fwd J v = %.10g, FD = %.10g\n", k, seed, i,
                        X[i], Y[i], Z[i], jv[i], fdv);
                bad++;
            }
            double inner = 0;
            for (int a = 0; a < 3; a++) {
                double g = W[i] * (fp[a][i] - fm[a][i]) / (2 * h);
                double tg = 1e-5 * (1 + fabs(g));
                if (!(fabs(jtw[i * 3 + a] - g) <= tg)) {
                    fprintf(stderr, "  case %s (seed %u) point %d: bwd d/d%c = %.10g, FD = %.10g\n", k, seed, i, "xyz"[a],
                            jtw[i * 3 + a], g);
                    bad++;
                }
                inner += V[i * 3 + a] * jtw[i * 3 + a];
            }
            if (!(fabs(inner - jv[i] * W[i]) <= 1e-9 * (1 + fabs(inner)))) {
                fprintf(stderr, "  case %s point %d: <v, J^T w> = %.12g but <J v, w> = %.12g\n", k, i, inner, jv[i] * W[i]);
                bad++;
            }
        }
        if (bad) nb_test_failures_++;
    }
    nb_module_free(m);
}

/* ---- second order: forward-over-forward and forward-over-reverse ------------------------------
 * For every case (but those calling a custom derivative, which has no derivative itself):
 *   dd_NAME(p, v) = fwd_diff(fwd_diff(NAME)) with pairs ((p, v), (v, 0))  -> v^T H v
 *   hv_NAME(p, v) = fwd_diff(bwd_diff(NAME)) with pairs ((p, 0), (v, 0)), dout (1, 0) -> H v
 * checked against central differences of the first derivatives fd_NAME (J v) and bd_NAME (J^T 1)
 * along v, and against each other (v^T (H v) == v^T H v). */
static int second_order_case(int i) { return strcmp(CASES[i].name, "c_custom") != 0; }

static char *build_source2(void)
{
    char *s = build_source();
    size_t n = strlen(s), cap = n + 1 + (size_t)NCASES * 1024;
    s = realloc(s, cap);
    for (int i = 0; i < NCASES; i++) {
        if (!second_order_case(i)) continue;
        const char *k = CASES[i].name;
        n += (size_t)snprintf(s + n, cap - n,
                              "double dd_%s(double x, double y, double z, double3 v) {\n"
                              "    return fwd_diff(fwd_diff(%s))(diffPair(diffPair(x, v.x), diffPair(v.x, 0.0)),\n"
                              "        diffPair(diffPair(y, v.y), diffPair(v.y, 0.0)), diffPair(diffPair(z, v.z), diffPair(v.z, 0.0))).d.d; }\n"
                              "double3 hv_%s(double x, double y, double z, double3 v) {\n"
                              "    DifferentialPair<DifferentialPair<double>> px = diffPair(diffPair(x, 0.25), diffPair(v.x, 0.0));\n"
                              "    DifferentialPair<DifferentialPair<double>> py = diffPair(diffPair(y, 0.0), diffPair(v.y, 0.0));\n"
                              "    DifferentialPair<DifferentialPair<double>> pz = diffPair(diffPair(z, 0.0), diffPair(v.z, 0.0));\n"
                              "    fwd_diff(bwd_diff(%s))(px, py, pz, diffPair(double(1.0), double(0.0)));\n"
                              "    return double3(px.d.d, py.d.d, pz.d.d) + double3(px.p.d - bd_%s(x, y, z, 1.0).x, 0.0, 0.0); }\n",
                              k, k, k, k, k);
    }
    return s;
}

static void check_second_order(nb_device *dev)
{
    unsigned seed = ad_seed(1);
    srand(seed);
    char *src = build_source2();
    nb_module *m = NULL;
    nb_status st = nb_module_load_source(dev, "ad_fd2.nb", src, NULL, &m);
    free(src);
    if (st != NB_OK) {
        fprintf(stderr, "  %s\n", nb_last_error());
        NB_REQUIRE_OK(st);
    }
    const double h = 1e-5;
    for (int ci = 0; ci < NCASES; ci++) {
        if (!second_order_case(ci)) continue;
        const char *k = CASES[ci].name;
        double X[NPTS], Y[NPTS], Z[NPTS], V[NPTS * 3], ONE[NPTS];
        double Xp[NPTS], Yp[NPTS], Zp[NPTS], Xm[NPTS], Ym[NPTS], Zm[NPTS];
        for (int i = 0; i < NPTS; i++) {
            X[i] = 0.2 + 0.7 * urand();
            Y[i] = 0.2 + 0.7 * urand();
            Z[i] = 0.2 + 0.7 * urand();
            for (int j = 0; j < 3; j++) V[i * 3 + j] = 2.0 * urand() - 1.0;
            ONE[i] = 1.0;
            Xp[i] = X[i] + h * V[i * 3];
            Yp[i] = Y[i] + h * V[i * 3 + 1];
            Zp[i] = Z[i] + h * V[i * 3 + 2];
            Xm[i] = X[i] - h * V[i * 3];
            Ym[i] = Y[i] - h * V[i * 3 + 1];
            Zm[i] = Z[i] - h * V[i * 3 + 2];
        }
        double dd[NPTS], hv[NPTS * 3], jvp[NPTS], jvm[NPTS], gp[NPTS * 3], gm[NPTS * 3];
        char n1[64], n2[64], n3[64], n4[64];
        snprintf(n1, sizeof n1, "dd_%s", k);
        snprintf(n2, sizeof n2, "hv_%s", k);
        snprintf(n3, sizeof n3, "fd_%s", k);
        snprintf(n4, sizeof n4, "bd_%s", k);
        int ok = run(m, n1, dev, X, Y, Z, V, 3, dd, 1) && run(m, n2, dev, X, Y, Z, V, 3, hv, 3) &&
                 run(m, n3, dev, Xp, Yp, Zp, V, 3, jvp, 1) && run(m, n3, dev, Xm, Ym, Zm, V, 3, jvm, 1) &&
                 run(m, n4, dev, Xp, Yp, Zp, ONE, 1, gp, 3) && run(m, n4, dev, Xm, Ym, Zm, ONE, 1, gm, 3);
        if (!ok) {
            fprintf(stderr, "  second-order case %s: call failed\n", k);
            nb_test_failures_++;
            continue;
        }
        int bad = 0;
        for (int i = 0; i < NPTS && bad < 3; i++) {
            /* a first derivative that jumps between p - h v and p + h v (floor, fmod, int(x), a branch)
             * gives |FD| ~ 1/h: no second derivative to compare there */
            const double jump = 1e4;
            double fdd = (jvp[i] - jvm[i]) / (2 * h);
            if (fabs(fdd) < jump && !(fabs(dd[i] - fdd) <= 1e-5 * (1 + fabs(fdd)))) {
                fprintf(stderr, "  case %s (seed %u) point %d: fwd-over-fwd v^T H v = %.10g, FD = %.10g\n", k, seed, i,
                        dd[i], fdd);
                bad++;
            }
            double vhv = 0;
            for (int a = 0; a < 3; a++) {
                double g = (gp[i * 3 + a] - gm[i * 3 + a]) / (2 * h);
                if (fabs(g) < jump && !(fabs(hv[i * 3 + a] - g) <= 1e-5 * (1 + fabs(g)))) {
                    fprintf(stderr, "  case %s (seed %u) point %d (%.6f %.6f %.6f): fwd-over-bwd (H v)_%c = %.10g, FD = %.10g\n",
                            k, seed, i, X[i], Y[i], Z[i], "xyz"[a], hv[i * 3 + a], g);
                    bad++;
                }
                vhv += V[i * 3 + a] * hv[i * 3 + a];
            }
            if (!(fabs(vhv - dd[i]) <= 1e-8 * (1 + fabs(vhv)))) {
                fprintf(stderr, "  case %s point %d: v^T (H v) = %.12g but v^T H v = %.12g\n", k, i, vhv, dd[i]);
                bad++;
            }
        }
        if (bad) nb_test_failures_++;
    }
    nb_module_free(m);
}

static void test_fd_cpu(void)
{
    nb_device *d = NULL;
    NB_REQUIRE_OK(nb_device_open("cpu", &d));
    check_device(d);
    check_second_order(d);
    nb_device_close(d);
}

static void test_fd_cuda(void)
{
    if (nb_cuda_device_count() == 0) NB_SKIP("no CUDA device");
    nb_device *d = NULL;
    NB_REQUIRE_OK(nb_device_open("cuda", &d));
    check_device(d);
    check_second_order(d);
    nb_device_close(d);
}

/* Diagnostics, never internal errors. */
static void test_diagnostics(void)
{
    static const struct {
        const char *src, *msg;
    } D[] = {
        {"double g(double x) { return x; }\n[Differentiable] double f(double x) { return g(x) * x; }\n"
         "double t(double x) { return fwd_diff(f)(diffPair(x, 1.0)).d; }\n",
         "cannot differentiate through 'g'"},
        {"[Differentiable] double f(double x) { double s = x; while (s < 10.0) { s = s * 2.0; } return s; }\n"
         "double t(double x) { DifferentialPair<double> p = diffPair(x); bwd_diff(f)(p, 1.0); return p.d; }\n",
         "add [MaxIters(n)]"},
        {"double f(double x) { return x; }\n"
         "double t(double x) { return fwd_diff(f)(diffPair(x, 1.0)).d; }\n",
         "not differentiable"},
    };
    nb_device *d = NULL;
    NB_REQUIRE_OK(nb_device_open("cpu", &d));
    for (int i = 0; i < (int)(sizeof D / sizeof D[0]); i++) {
        nb_module *m = NULL;
        nb_status st = nb_module_load_source(d, "diag.nb", D[i].src, NULL, &m);
        if (st == NB_OK) {
            nb_func *f = NULL;
            nb_call *c = NULL;
            nb_tensor *r = NULL;
            st = nb_module_func(m, "t", &f);
            if (st == NB_OK) st = nb_call_begin(f, &c);
            if (st == NB_OK) st = nb_call_arg_double(c, 0, 1.0);
            if (st == NB_OK) st = nb_call_run(c, &r); /* (frees c) */
            else nb_call_free(c);
            nb_tensor_free(r);
        }
        NB_EXPECT(st == NB_ERR_COMPILE);
        if (!strstr(nb_last_error(), D[i].msg) || !strstr(nb_last_error(), "diag.nb:")) {
            fprintf(stderr, "  diagnostic %d: \"%s\" lacks \"%s\"\n", i, nb_last_error(), D[i].msg);
            nb_test_failures_++;
        }
        nb_module_free(m);
    }
    nb_device_close(d);
}

/* ---- fwds / bwds call kernels (callsig.h NB_CALL_FWD / NB_CALL_BWD, lang/ad.h wrappers) --------
 * f(w, x) = tanh(w x) w over N values of x with one shared w (stride 0): the bwds kernel must
 * ACCUMULATE dL/dw over all threads into one element (warp reduction + atomics on CUDA, atomics
 * on the CPU) and dL/dx per element; the fwds kernel gives f and df along (dw, dx). */
static const char *KSRC = "[Differentiable] float f(float w, float x) { return tanh(w * x) * w; }\n";

static void set_i64(unsigned char *blk, size_t off, int64_t v) { memcpy(blk + off, &v, 8); }

static void put_array(unsigned char *blk, const nb_call_layout *L, int leaf, const nb_tensor *t, int64_t stride)
{
    uint64_t a = (uint64_t)(uintptr_t)nb_tensor_data(t);
    memcpy(blk + L->leaves[leaf].offset, &a, 8);
    set_i64(blk, L->leaves[leaf].strides_offset, stride);
}

static void run_kernel(nb_device *dev, nb_program *p, nb_call_sig *sig, nb_tensor **arrs, const int64_t *strides, int n)
{
    nb_strbuf src;
    nb_strbuf_init(&src);
    nb_call_layout L;
    sig->target = nb_device_get_kind(dev) == NB_DEVICE_CUDA ? NB_TARGET_CUDA : NB_TARGET_C;
    NB_REQUIRE_OK(nb_program_emit_call(p, sig, &src, &L));
    if (sig->mode == NB_CALL_BWD && sig->target == NB_TARGET_CUDA)
        NB_EXPECT(strstr(nb_strbuf_cstr(&src), "__shfl_down_sync") != NULL);
    nb_jit_kernel *k = NULL;
    nb_status st = nb_jit_load(dev, nb_strbuf_cstr(&src), L.entry, NULL, &k);
    nb_strbuf_free(&src);
    NB_REQUIRE_OK(st);
    unsigned char blk[4096];
    memset(blk, 0, sizeof blk);
    set_i64(blk, L.shape_offset, n);
    for (int i = 0; i < sig->nleaves; i++) put_array(blk, &L, i, arrs[i], strides[i]);
    if (sig->target == NB_TARGET_CUDA) {
        NB_REQUIRE_OK(nb_jit_launch_cuda(k, blk, L.size, n, NULL));
        NB_REQUIRE_OK(nb_device_synchronize(dev));
    } else {
        NB_REQUIRE_OK(nb_jit_launch_cpu(k, blk, n));
    }
}

static void check_call_kernels(nb_device *dev)
{
    enum { N = 20000 };
    nb_program *p = NULL;
    NB_REQUIRE_OK(nb_program_compile_source("k.nb", KSRC, NULL, &p));
    static float x[N], dout[N], xg[N], res[N], resd[N];
    float w = 0.7f, wg = 1.0f, one = 1.0f, zero = 0.0f;
    for (int i = 0; i < N; i++) {
        x[i] = 2.0f * (float)urand() - 1.0f;
        dout[i] = (float)urand();
        xg[i] = 0.5f;
    }
    int64_t shp[1] = {N}, one_shape[1] = {1};
    nb_tensor *tw = NULL, *tx = NULL, *twg = NULL, *txg = NULL, *tdo = NULL, *tdw = NULL, *tdx = NULL, *tr = NULL,
              *trd = NULL;
    NB_REQUIRE_OK(nb_tensor_from_host(dev, NB_F32, 1, one_shape, &w, &tw));
    NB_REQUIRE_OK(nb_tensor_from_host(dev, NB_F32, 1, shp, x, &tx));
    NB_REQUIRE_OK(nb_tensor_from_host(dev, NB_F32, 1, one_shape, &wg, &twg));
    NB_REQUIRE_OK(nb_tensor_from_host(dev, NB_F32, 1, shp, xg, &txg));
    NB_REQUIRE_OK(nb_tensor_from_host(dev, NB_F32, 1, shp, dout, &tdo));
    NB_REQUIRE_OK(nb_tensor_from_host(dev, NB_F32, 1, one_shape, &one, &tdw));
    NB_REQUIRE_OK(nb_tensor_from_host(dev, NB_F32, 1, one_shape, &zero, &tdx));
    NB_REQUIRE_OK(nb_tensor_zeros(dev, NB_F32, 1, shp, &tr));
    NB_REQUIRE_OK(nb_tensor_zeros(dev, NB_F32, 1, shp, &trd));
    /* bwds: f__bwds(in w, in x, out+accum w_grad, out+accum x_grad, in _dout) */
    nb_call_sig sig;
    memset(&sig, 0, sizeof sig);
    sig.func = "f";
    sig.mode = NB_CALL_BWD;
    sig.ndim = 1;
    sig.nleaves = 5;
    for (int i = 0; i < 5; i++) {
        sig.leaves[i].bind = NB_BIND_ARRAY;
        sig.leaves[i].storage = NB_F32;
        sig.leaves[i].param = i;
    }
    nb_tensor *ba[5] = {tw, tx, twg, txg, tdo};
    int64_t bs[5] = {0, 4, 0, 4, 4};
    run_kernel(dev, p, &sig, ba, bs, N);
    float got_wg = 0;
    static float got_xg[N];
    NB_EXPECT_OK(nb_tensor_to_host(twg, &got_wg, 4));
    NB_EXPECT_OK(nb_tensor_to_host(txg, got_xg, sizeof got_xg));
    double want_wg = 1.0, abs_wg = 1.0; /* abs_wg: scale of a float32 sum of N atomic adds */
    int bad = 0;
    for (int i = 0; i < N; i++) {
        double t = tanh((double)w * x[i]), s = 1 - t * t;
        want_wg += dout[i] * (x[i] * s * w + t);
        abs_wg += fabs(dout[i] * (x[i] * s * w + t));
        double want_x = 0.5 + dout[i] * w * w * s;
        if (fabs(got_xg[i] - want_x) > 1e-5 * (1 + fabs(want_x)) && bad++ < 3)
            fprintf(stderr, "  bwds x_grad[%d] = %.7g, want %.7g\n", i, got_xg[i], want_x);
    }
    if (bad) nb_test_failures_++;
    /* The order of the threads' float adds varies run to run: tolerance scales with the terms. */
    NB_EXPECT_NEAR(got_wg, want_wg, 1e-4 * abs_wg);
    /* fwds: f__fwds(in w, in x, in d_w, in d_x, out _result_d) -> result */
    sig.mode = NB_CALL_FWD;
    sig.nleaves = 6;
    sig.has_result = 1;
    sig.leaves[5] = sig.leaves[4];
    sig.leaves[5].param = -1;
    nb_tensor *fa[6] = {tw, tx, tdw, tdx, trd, tr};
    int64_t fs[6] = {0, 4, 0, 0, 4, 4};
    run_kernel(dev, p, &sig, fa, fs, N);
    NB_EXPECT_OK(nb_tensor_to_host(tr, res, sizeof res));
    NB_EXPECT_OK(nb_tensor_to_host(trd, resd, sizeof resd));
    bad = 0;
    for (int i = 0; i < N; i++) {
        double t = tanh((double)w * x[i]), s = 1 - t * t;
        if ((fabs(res[i] - t * w) > 1e-5 || fabs(resd[i] - (x[i] * s * w + t)) > 1e-5) && bad++ < 3)
            fprintf(stderr, "  fwds [%d] = (%.7g, %.7g), want (%.7g, %.7g)\n", i, res[i], resd[i], t * w, x[i] * s * w + t);
    }
    if (bad) nb_test_failures_++;
    nb_tensor *all[] = {tw, tx, twg, txg, tdo, tdw, tdx, tr, trd};
    for (int i = 0; i < 9; i++) nb_tensor_free(all[i]);
    nb_program_free(p);
}

/* The same through the public C API (nb_call_set_mode / nb_call_grad / nb_call_tangent). */
static void check_api(nb_device *dev)
{
    enum { N = 20000 };
    nb_module *m = NULL;
    NB_REQUIRE_OK(nb_module_load_source(dev, "k.nb", KSRC, NULL, &m));
    nb_func *f = NULL;
    NB_REQUIRE_OK(nb_module_func(m, "f", &f));
    static float x[N], res[N], resd[N];
    for (int i = 0; i < N; i++) x[i] = 2.0f * (float)urand() - 1.0f;
    float w = 0.35f, wg = 2.0f, one = 1.0f;
    int64_t shp[1] = {N}, s1[1] = {1};
    nb_tensor *tx = NULL, *txg = NULL, *twg = NULL, *tone = NULL, *tw = NULL;
    NB_REQUIRE_OK(nb_tensor_from_host(dev, NB_F32, 1, shp, x, &tx));
    NB_REQUIRE_OK(nb_tensor_zeros(dev, NB_F32, 1, shp, &txg));
    NB_REQUIRE_OK(nb_tensor_from_host(dev, NB_F32, 1, s1, &wg, &twg));
    NB_REQUIRE_OK(nb_tensor_from_host(dev, NB_F32, 0, s1, &one, &tone));
    NB_REQUIRE_OK(nb_tensor_from_host(dev, NB_F32, 0, s1, &w, &tw));
    /* bwds twice: gradients accumulate. The second asks for the result too: one fused forward +
     * backward kernel (f__bwdr) that returns f's value as well. */
    nb_tensor *fused = NULL;
    for (int rep = 0; rep < 2; rep++) {
        nb_call *c = NULL;
        NB_REQUIRE_OK(nb_call_begin(f, &c));
        NB_EXPECT_OK(nb_call_set_mode(c, NB_MODE_BWD));
        NB_EXPECT_OK(nb_call_arg(c, 0, tw));
        NB_EXPECT_OK(nb_call_arg(c, 1, tx));
        NB_EXPECT_OK(nb_call_grad(c, 0, twg));
        NB_EXPECT_OK(nb_call_grad(c, 1, txg));
        NB_REQUIRE_OK(nb_call_run(c, rep ? &fused : NULL));
    }
    NB_EXPECT(fused && nb_tensor_numel(fused) == N);
    if (fused) {
        NB_EXPECT_OK(nb_tensor_to_host(fused, res, sizeof res));
        int badr = 0;
        for (int i = 0; i < N; i++)
            if (fabs(res[i] - tanh((double)w * x[i]) * w) > 1e-5 && badr++ < 3)
                fprintf(stderr, "  api fused bwds result[%d] = %.7g, want %.7g\n", i, res[i], tanh((double)w * x[i]) * w);
        if (badr) nb_test_failures_++;
        nb_tensor_free(fused);
    }
    float got_wg = 0;
    static float got_xg[N];
    NB_EXPECT_OK(nb_tensor_to_host(twg, &got_wg, 4));
    NB_EXPECT_OK(nb_tensor_to_host(txg, got_xg, sizeof got_xg));
    double want_wg = 2.0, abs_wg = 2.0; /* abs_wg: scale of a float32 sum of N atomic adds */
    int bad = 0;
    for (int i = 0; i < N; i++) {
        double t = tanh((double)w * x[i]), s = 1 - t * t;
        want_wg += 2 * (x[i] * s * w + t);
        abs_wg += fabs(2 * (x[i] * s * w + t));
        double want_x = 2 * w * w * s;
        if (fabs(got_xg[i] - want_x) > 1e-5 * (1 + fabs(want_x)) && bad++ < 3)
            fprintf(stderr, "  api bwds x_grad[%d] = %.7g, want %.7g\n", i, got_xg[i], want_x);
    }
    if (bad) nb_test_failures_++;
    /* The order of the threads' float adds varies run to run: tolerance scales with the terms. */
    NB_EXPECT_NEAR(got_wg, want_wg, 1e-4 * abs_wg);
    /* fwds along w */
    nb_call *c = NULL;
    nb_tensor *r = NULL, *rd = NULL;
    NB_REQUIRE_OK(nb_call_begin(f, &c));
    NB_EXPECT_OK(nb_call_set_mode(c, NB_MODE_FWD));
    NB_EXPECT_OK(nb_call_arg(c, 0, tw));
    NB_EXPECT_OK(nb_call_arg(c, 1, tx));
    NB_EXPECT_OK(nb_call_tangent(c, 0, tone));
    NB_EXPECT_OK(nb_call_tangent_alloc(c, &rd));
    NB_REQUIRE_OK(nb_call_run(c, &r));
    NB_EXPECT_OK(nb_tensor_to_host(r, res, sizeof res));
    NB_EXPECT_OK(nb_tensor_to_host(rd, resd, sizeof resd));
    bad = 0;
    for (int i = 0; i < N; i++) {
        double t = tanh((double)w * x[i]), s = 1 - t * t;
        if ((fabs(res[i] - t * w) > 1e-5 || fabs(resd[i] - (x[i] * s * w + t)) > 1e-5) && bad++ < 3)
            fprintf(stderr, "  api fwds [%d] = (%.7g, %.7g)\n", i, res[i], resd[i]);
    }
    if (bad) nb_test_failures_++;
    /* misuse is an error, not a crash */
    NB_REQUIRE_OK(nb_call_begin(f, &c));
    NB_EXPECT_ERR(nb_call_grad(c, 0, twg), NB_ERR_INVALID_ARG, "nb_call_set_mode");
    NB_EXPECT_OK(nb_call_set_mode(c, NB_MODE_BWD));
    NB_EXPECT_ERR(nb_call_grad(c, 5, twg), NB_ERR_INVALID_ARG, "no parameter 5");
    nb_call_free(c);
    nb_tensor *all[] = {tx, txg, twg, tone, tw, r, rd};
    for (int i = 0; i < 7; i++) nb_tensor_free(all[i]);
    nb_module_free(m);
}

/* Per-thread rows (float[40] and float[64] parameters fed by [N, 40] / [N, 64] arrays, N not a
 * multiple of 32): on CUDA these go through the warp-staged row loads (callgen.c), with the tail
 * warp's idle lanes helping; the fused bwds call returns the result as well. */
static void check_rows(nb_device *dev)
{
    static const char *src = "[Differentiable]\n"
                             "float dotn(float w[64], float x[64]) { float s = 0; for (int k = 0; k < 64; k++) s += w[k] * x[k]; return s; }\n"
                             "float sq40(float x[40]) { float s = 0; for (int k = 0; k < 40; k++) s += x[k] * x[k] * float(k + 1); return s; }\n";
    enum { N = 1001 };
    nb_module *m = NULL;
    NB_REQUIRE_OK(nb_module_load_source(dev, "rows.nb", src, NULL, &m));
    nb_func *fd = NULL, *fs = NULL;
    NB_REQUIRE_OK(nb_module_func(m, "dotn", &fd));
    NB_REQUIRE_OK(nb_module_func(m, "sq40", &fs));
    static float x[N][64], x40[N][40], w[64], y[N], xg[N][64], wg[64];
    for (int i = 0; i < N; i++) {
        for (int k = 0; k < 64; k++) x[i][k] = 2.0f * (float)urand() - 1.0f;
        for (int k = 0; k < 40; k++) x40[i][k] = 2.0f * (float)urand() - 1.0f;
    }
    for (int k = 0; k < 64; k++) w[k] = 2.0f * (float)urand() - 1.0f;
    int64_t sx[2] = {N, 64}, sh40[2] = {N, 40}, sw[1] = {64};
    nb_tensor *tx = NULL, *t40 = NULL, *tw = NULL, *txg = NULL, *twg = NULL, *ty = NULL, *ty40 = NULL;
    NB_REQUIRE_OK(nb_tensor_from_host(dev, NB_F32, 2, sx, x, &tx));
    NB_REQUIRE_OK(nb_tensor_from_host(dev, NB_F32, 2, sh40, x40, &t40));
    NB_REQUIRE_OK(nb_tensor_from_host(dev, NB_F32, 1, sw, w, &tw));
    NB_REQUIRE_OK(nb_tensor_zeros(dev, NB_F32, 2, sx, &txg));
    NB_REQUIRE_OK(nb_tensor_zeros(dev, NB_F32, 1, sw, &twg));
    nb_call *c = NULL;
    NB_REQUIRE_OK(nb_call_begin(fd, &c));
    NB_EXPECT_OK(nb_call_set_mode(c, NB_MODE_BWD));
    NB_EXPECT_OK(nb_call_arg(c, 0, tw));
    NB_EXPECT_OK(nb_call_arg(c, 1, tx));
    NB_EXPECT_OK(nb_call_grad(c, 0, twg));
    NB_EXPECT_OK(nb_call_grad(c, 1, txg));
    NB_EXPECT_OK(nb_call_run(c, &ty));
    NB_REQUIRE_OK(nb_call_begin(fs, &c));
    NB_EXPECT_OK(nb_call_arg(c, 0, t40));
    NB_EXPECT_OK(nb_call_run(c, &ty40));
    static float y40[N];
    NB_EXPECT(ty && ty40);
    if (ty && ty40) {
        NB_EXPECT_OK(nb_tensor_to_host(ty, y, sizeof y));
        NB_EXPECT_OK(nb_tensor_to_host(ty40, y40, sizeof y40));
        NB_EXPECT_OK(nb_tensor_to_host(txg, xg, sizeof xg));
        NB_EXPECT_OK(nb_tensor_to_host(twg, wg, sizeof wg));
        int bad = 0;
        double want_wg[64] = {0}, scale[64] = {0};
        for (int i = 0; i < N; i++) {
            double s = 0, s40 = 0;
            for (int k = 0; k < 64; k++) {
                s += (double)w[k] * x[i][k];
                want_wg[k] += x[i][k];
                scale[k] += fabs(x[i][k]);
                if (fabs(xg[i][k] - w[k]) > 1e-6 && bad++ < 3) fprintf(stderr, "  rows x_grad[%d][%d] = %g, want %g\n", i, k, xg[i][k], w[k]);
            }
            for (int k = 0; k < 40; k++) s40 += (double)x40[i][k] * x40[i][k] * (k + 1);
            if (fabs(y[i] - s) > 1e-4 && bad++ < 3) fprintf(stderr, "  rows dotn[%d] = %g, want %g\n", i, y[i], s);
            if (fabs(y40[i] - s40) > 1e-3 && bad++ < 3) fprintf(stderr, "  rows sq40[%d] = %g, want %g\n", i, y40[i], s40);
        }
        for (int k = 0; k < 64; k++)
            if (fabs(wg[k] - want_wg[k]) > 1e-5 * (1 + scale[k]) && bad++ < 3) fprintf(stderr, "  rows w_grad[%d] = %g, want %g\n", k, wg[k], want_wg[k]);
        if (bad) nb_test_failures_++;
    }
    nb_tensor *all[] = {tx, t40, tw, txg, twg, ty, ty40};
    for (int i = 0; i < 7; i++) nb_tensor_free(all[i]);
    nb_module_free(m);
}

/* DiffTensor<float,1> parameters: reads in a differentiable function add their gradient into the
 * tensor's gradient array (atomically: many threads hit the same elements), writes take theirs
 * from it; forward mode reads tangents from it. nb_call_grad binds it in any mode, so a plain call
 * of a function that runs bwd_diff inside (the slangtorch pattern) accumulates too. */
static void check_difftensor(nb_device *dev)
{
    static const char *src =
        "[Differentiable]\n"
        "float lookup(DiffTensor<float, 1> t, float x) {\n"
        "    int i = int(x);\n"
        "    float f = x - float(i);\n"
        "    return t[i] * (1.0 - f) + t[i + 1] * f;\n"
        "}\n"
        "[Differentiable]\n"
        "void scatter(DiffTensor<float, 1> o, float x, float v) { o[int(x)] = v * v; }\n"
        "void train(DiffTensor<float, 1> t, float x) { DifferentialPair<float> p = diffPair(x); bwd_diff(lookup)(t, p, 2.0); }\n";
    enum { N = 777, T = 9 };
    nb_module *m = NULL;
    NB_REQUIRE_OK(nb_module_load_source(dev, "dt.nb", src, NULL, &m));
    nb_func *fl = NULL, *fs = NULL, *ft = NULL;
    NB_REQUIRE_OK(nb_module_func(m, "lookup", &fl));
    NB_REQUIRE_OK(nb_module_func(m, "scatter", &fs));
    NB_REQUIRE_OK(nb_module_func(m, "train", &ft));
    static float x[N], tv[T], g[T], y[N], xg[N], tan[T], yt[N];
    for (int i = 0; i < N; i++) x[i] = (float)((T - 1.01) * urand());
    for (int k = 0; k < T; k++) { tv[k] = (float)(k * k) * 0.5f; tan[k] = (float)k - 3.0f; }
    int64_t sn[1] = {N}, st[1] = {T}, s5[1] = {T - 1};
    nb_tensor *tx = NULL, *tt = NULL, *tg = NULL, *txg = NULL, *ty = NULL, *ttan = NULL, *tyt = NULL, *bad = NULL;
    NB_REQUIRE_OK(nb_tensor_from_host(dev, NB_F32, 1, sn, x, &tx));
    NB_REQUIRE_OK(nb_tensor_from_host(dev, NB_F32, 1, st, tv, &tt));
    NB_REQUIRE_OK(nb_tensor_zeros(dev, NB_F32, 1, st, &tg));
    NB_REQUIRE_OK(nb_tensor_zeros(dev, NB_F32, 1, sn, &txg));
    NB_REQUIRE_OK(nb_tensor_from_host(dev, NB_F32, 1, st, tan, &ttan));
    /* 1. bwds (fused: result too) */
    nb_call *c = NULL;
    NB_REQUIRE_OK(nb_call_begin(fl, &c));
    NB_EXPECT_OK(nb_call_set_mode(c, NB_MODE_BWD));
    NB_EXPECT_OK(nb_call_arg(c, 0, tt));
    NB_EXPECT_OK(nb_call_arg(c, 1, tx));
    NB_EXPECT_OK(nb_call_grad(c, 0, tg));
    NB_EXPECT_OK(nb_call_grad(c, 1, txg));
    NB_EXPECT_OK(nb_call_run(c, &ty));
    /* 2. a plain call of train(): bwd_diff inside, dout 2: tg gets 2x more */
    NB_REQUIRE_OK(nb_call_begin(ft, &c));
    NB_EXPECT_OK(nb_call_arg(c, 0, tt));
    NB_EXPECT_OK(nb_call_arg(c, 1, tx));
    NB_EXPECT_OK(nb_call_grad(c, 0, tg));
    NB_EXPECT_OK(nb_call_run(c, NULL));
    /* 3. fwds: the tangent of t from its gradient array */
    NB_REQUIRE_OK(nb_call_begin(fl, &c));
    NB_EXPECT_OK(nb_call_set_mode(c, NB_MODE_FWD));
    NB_EXPECT_OK(nb_call_arg(c, 0, tt));
    NB_EXPECT_OK(nb_call_arg(c, 1, tx));
    NB_EXPECT_OK(nb_call_tangent(c, 0, ttan));
    NB_EXPECT_OK(nb_call_tangent_alloc(c, &tyt));
    nb_tensor *yy = NULL;
    NB_EXPECT_OK(nb_call_run(c, &yy));
    nb_tensor_free(yy);
    if (ty && tyt) {
        NB_EXPECT_OK(nb_tensor_to_host(ty, y, sizeof y));
        NB_EXPECT_OK(nb_tensor_to_host(tyt, yt, sizeof yt));
        NB_EXPECT_OK(nb_tensor_to_host(txg, xg, sizeof xg));
        NB_EXPECT_OK(nb_tensor_to_host(tg, g, sizeof g));
        double want_g[T] = {0};
        int badc = 0;
        for (int i = 0; i < N; i++) {
            int k = (int)x[i];
            double f = x[i] - (double)k;
            double wy = tv[k] * (1 - f) + tv[k + 1] * f, wt = tan[k] * (1 - f) + tan[k + 1] * f, wx = tv[k + 1] - tv[k];
            want_g[k] += 3 * (1 - f);
            want_g[k + 1] += 3 * f;
            if ((fabs(y[i] - wy) > 1e-4 || fabs(yt[i] - wt) > 1e-4 || fabs(xg[i] - wx) > 1e-4) && badc++ < 3)
                fprintf(stderr, "  difftensor [%d]: y %g (%g) tangent %g (%g) x_grad %g (%g)\n", i, y[i], wy, yt[i], wt, xg[i], wx);
        }
        for (int k = 0; k < T; k++)
            /* float atomics in any order: rounding relative to the sum's magnitude */
            if (fabs(g[k] - want_g[k]) > 1e-3 + 2e-5 * fabs(want_g[k]) && badc++ < 3)
                fprintf(stderr, "  difftensor t_grad[%d] = %g, want %g\n", k, g[k], want_g[k]);
        if (badc) nb_test_failures_++;
    } else NB_EXPECT(0);
    /* 4. a DiffTensor write takes its gradient from the gradient array: v_grad = 2 v g[int(x)] */
    {
        float xs[3] = {1.5f, 4.2f, 7.9f}, vs[3] = {0.5f, -2.0f, 3.0f}, gw[T], vg[3];
        for (int k = 0; k < T; k++) gw[k] = 10.0f + (float)k;
        int64_t s3[1] = {3};
        nb_tensor *txs = NULL, *tvs = NULL, *tgw = NULL, *tvg = NULL, *to = NULL;
        NB_REQUIRE_OK(nb_tensor_from_host(dev, NB_F32, 1, s3, xs, &txs));
        NB_REQUIRE_OK(nb_tensor_from_host(dev, NB_F32, 1, s3, vs, &tvs));
        NB_REQUIRE_OK(nb_tensor_from_host(dev, NB_F32, 1, st, gw, &tgw));
        NB_REQUIRE_OK(nb_tensor_zeros(dev, NB_F32, 1, s3, &tvg));
        NB_REQUIRE_OK(nb_tensor_zeros(dev, NB_F32, 1, st, &to));
        NB_REQUIRE_OK(nb_call_begin(fs, &c));
        NB_EXPECT_OK(nb_call_set_mode(c, NB_MODE_BWD));
        NB_EXPECT_OK(nb_call_arg(c, 0, to));
        NB_EXPECT_OK(nb_call_arg(c, 1, txs));
        NB_EXPECT_OK(nb_call_arg(c, 2, tvs));
        NB_EXPECT_OK(nb_call_grad(c, 0, tgw));
        NB_EXPECT_OK(nb_call_grad(c, 2, tvg));
        NB_EXPECT_OK(nb_call_run(c, NULL));
        NB_EXPECT_OK(nb_tensor_to_host(tvg, vg, sizeof vg));
        for (int i = 0; i < 3; i++) NB_EXPECT_NEAR(vg[i], 2.0 * vs[i] * gw[(int)xs[i]], 1e-4);
        nb_tensor *all[] = {txs, tvs, tgw, tvg, to};
        for (int i = 0; i < 5; i++) nb_tensor_free(all[i]);
    }
    /* 5. bad gradient arrays: clear errors */
    NB_REQUIRE_OK(nb_tensor_zeros(dev, NB_F32, 1, s5, &bad));
    NB_REQUIRE_OK(nb_call_begin(fl, &c));
    NB_EXPECT_OK(nb_call_arg(c, 0, tt));
    NB_EXPECT_OK(nb_call_arg(c, 1, tx));
    NB_EXPECT_OK(nb_call_grad(c, 0, bad));
    nb_tensor *r = NULL;
    NB_EXPECT_ERR(nb_call_run(c, &r), NB_ERR_SHAPE, "gradient array of DiffTensor 't'");
    nb_tensor_free(r);
    nb_tensor *bad64 = NULL;
    NB_REQUIRE_OK(nb_tensor_zeros(dev, NB_F64, 1, st, &bad64));
    NB_REQUIRE_OK(nb_call_begin(fl, &c));
    NB_EXPECT_ERR(nb_call_grad(c, 0, bad64), NB_ERR_DTYPE, "DiffTensor 't' holds f32");
    NB_EXPECT_ERR(nb_call_grad(c, 0, NULL), NB_ERR_INVALID_ARG, "the gradient array for 't' is NULL");
    nb_call_free(c);
    nb_tensor *all[] = {tx, tt, tg, txg, ty, ttan, tyt, bad, bad64};
    for (int i = 0; i < 9; i++) nb_tensor_free(all[i]);
    nb_module_free(m);
}

/* A parameter left to its default value stays so in derivative calls: f__bwds / f__fwds keep the
 * base function's defaults (a bwds call binding x alone was "missing argument for parameter 's'"). */
static void check_defaults(nb_device *dev)
{
    static const char *src = "[Differentiable] float sc(float x, float s = 3.0, float3 o = float3(1, 2, 4)) "
                             "{ return x * s * x + o.y; }\n";
    nb_module *m = NULL;
    NB_REQUIRE_OK(nb_module_load_source(dev, "defaults.nb", src, NULL, &m));
    nb_func *f = NULL;
    NB_REQUIRE_OK(nb_module_func(m, "sc", &f));
    float x[5] = {-2, -0.5f, 0, 1, 3}, gx[5], y[5], dy[5];
    int64_t n = 5;
    nb_tensor *tx = NULL, *tg = NULL, *ty = NULL, *td = NULL;
    NB_REQUIRE_OK(nb_tensor_from_host(dev, NB_F32, 1, &n, x, &tx));
    NB_REQUIRE_OK(nb_tensor_zeros(dev, NB_F32, 1, &n, &tg));
    NB_REQUIRE_OK(nb_tensor_zeros(dev, NB_F32, 1, &n, &td));
    nb_call *c = NULL;
    NB_REQUIRE_OK(nb_call_begin(f, &c));
    NB_EXPECT_OK(nb_call_set_mode(c, NB_MODE_BWD));
    NB_EXPECT_OK(nb_call_arg(c, 0, tx));
    NB_EXPECT_OK(nb_call_grad(c, 0, tg));
    NB_EXPECT_OK(nb_call_run(c, &ty)); /* the fused f__bwdr: f's value too */
    NB_REQUIRE_OK(nb_call_begin(f, &c));
    NB_EXPECT_OK(nb_call_set_mode(c, NB_MODE_FWD));
    NB_EXPECT_OK(nb_call_arg(c, 0, tx));
    NB_EXPECT_OK(nb_call_tangent(c, 0, tx)); /* d/dt f(x + t x) = 6 x^2 */
    NB_EXPECT_OK(nb_call_tangent(c, -1, td));
    NB_EXPECT_OK(nb_call_run(c, NULL));
    NB_EXPECT_OK(nb_tensor_to_host(tg, gx, sizeof gx));
    if (ty) NB_EXPECT_OK(nb_tensor_to_host(ty, y, sizeof y));
    NB_EXPECT_OK(nb_tensor_to_host(td, dy, sizeof dy));
    for (int i = 0; i < 5; i++) {
        NB_EXPECT_NEAR(gx[i], 6.0 * x[i], 1e-5);
        if (ty) NB_EXPECT_NEAR(y[i], 3.0 * x[i] * x[i] + 2.0, 1e-5);
        NB_EXPECT_NEAR(dy[i], 6.0 * x[i] * x[i], 1e-4);
    }
    nb_tensor *all[] = {tx, tg, ty, td};
    for (int i = 0; i < 4; i++) nb_tensor_free(all[i]);
    nb_module_free(m);
}

static void test_call_kernels_cpu(void)
{
    nb_device *d = NULL;
    NB_REQUIRE_OK(nb_device_open("cpu", &d));
    check_call_kernels(d);
    check_api(d);
    check_rows(d);
    check_difftensor(d);
    check_defaults(d);
    nb_device_close(d);
}

static void test_call_kernels_cuda(void)
{
    if (nb_cuda_device_count() == 0) NB_SKIP("no CUDA device");
    nb_device *d = NULL;
    NB_REQUIRE_OK(nb_device_open("cuda", &d));
    check_call_kernels(d);
    check_api(d);
    check_rows(d);
    check_difftensor(d);
    check_defaults(d);
    nb_device_close(d);
}

int main(int argc, char **argv) { NB_TEST_MAIN(argc, argv, test_fd_cpu, test_fd_cuda, test_diagnostics, test_call_kernels_cpu, test_call_kernels_cuda); }
