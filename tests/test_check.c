/* Checker (semantic analysis), modules/imports, link-time constants and reflection: programs that
 * must check (with a look at the annotated tree) and programs that must fail with an exact
 * `file:line:col: error: …` diagnostic. */
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lang/check.h"
#include "lang/compiler.h"
#include "lang/intrinsics.h"
#include "lang/lexer.h"
#include "lang/program.h"
#include "nb_test.h"

/* ---- helpers ------------------------------------------------------------------------------ */

static nb_program *ok_prog(const char *src, int line) {
    nb_program *p = NULL;
    nb_status st = nb_program_compile_source("t.nb", src, NULL, &p);
    if (st != NB_OK) {
        fprintf(stderr, "  %s:%d: %s: expected the program to check, got:\n%s\n", __FILE__, line,
                nb_test_name_, nb_last_error());
        nb_test_failures_++;
        return NULL;
    }
    return p;
}
#define OK_PROG(src) ok_prog((src), __LINE__)

static void expect_ok(const char *src, int line) {
    nb_program *p = ok_prog(src, line);
    nb_program_free(p);
}
#define EXPECT_CHECKS(src) expect_ok((src), __LINE__)

static void expect_fail(const char *src, const char *msg, int line) {
    nb_program *p = NULL;
    nb_status st = nb_program_compile_source("t.nb", src, NULL, &p);
    if (st != NB_ERR_COMPILE) {
        fprintf(stderr, "  %s:%d: %s: expected a compile error containing \"%s\", got %s\n", __FILE__, line,
                nb_test_name_, msg, nb_status_name(st));
        nb_test_failures_++;
        nb_program_free(p);
        return;
    }
    if (!strstr(nb_last_error(), msg)) {
        fprintf(stderr, "  %s:%d: %s: diagnostics lack \"%s\":\n%s\n", __FILE__, line, nb_test_name_, msg,
                nb_last_error());
        nb_test_failures_++;
    }
}
#define EXPECT_FAILS(src, msg) expect_fail((src), (msg), __LINE__)

static nb_decl *find_fn(nb_program *p, const char *name) {
    for (int i = 0; p && i < p->main->ndecls; i++) {
        nb_decl *d = p->main->decls[i];
        if (d && d->kind == NB_DECL_FUNC && d->name && strcmp(d->name, name) == 0) return d;
    }
    return NULL;
}

/* Statement i of function `name`'s body. */
static nb_stmt *body_stmt(nb_program *p, const char *name, int i) {
    nb_decl *f = find_fn(p, name);
    if (!f || !f->u.func.body || f->u.func.body->kind != NB_ST_BLOCK || i >= f->u.func.body->u.block.count)
        return NULL;
    return f->u.func.body->u.block.items[i];
}

static nb_expr *ret_value(nb_program *p, const char *name, int i) {
    nb_stmt *s = body_stmt(p, name, i);
    return s && s->kind == NB_ST_RETURN ? s->u.ret.value : NULL;
}

/* Initializer of the local `var` declared at the top level of function `fn`'s body. */
static nb_expr *var_init(nb_program *p, const char *fn, const char *var) {
    nb_decl *f = find_fn(p, fn);
    if (!f || !f->u.func.body || f->u.func.body->kind != NB_ST_BLOCK) return NULL;
    for (int i = 0; i < f->u.func.body->u.block.count; i++) {
        nb_stmt *s = f->u.func.body->u.block.items[i];
        if (!s || s->kind != NB_ST_VAR) continue;
        for (int k = 0; k < s->u.var.count; k++)
            if (s->u.var.vars[k]->name && strcmp(s->u.var.vars[k]->name, var) == 0) return s->u.var.vars[k]->u.var.init;
    }
    return NULL;
}

static int type_is(const nb_expr *e, const char *name) {
    return e && e->type && strcmp(e->type->name, name) == 0;
}

/* ---- types, literals, conversions --------------------------------------------------------- */

static void test_literals_and_casts(void) {
    nb_program *p = OK_PROG("float f(int i) { return i; }\n"
                            "double d() { return 1.0l; }\n"
                            "half h() { return 1.0h; }\n"
                            "float g() { return 1.0; }\n"
                            "uint u() { return 3u; }\n"
                            "float3 s(float x) { return x; }\n");
    if (!p) return;
    nb_expr *r = ret_value(p, "f", 0);
    NB_EXPECT(r && r->kind == NB_EX_CAST && r->u.cast.implicit && type_is(r, "float"));
    NB_EXPECT(r && r->u.cast.operand->kind == NB_EX_NAME && r->u.cast.operand->ref == NB_REF_PARAM &&
              type_is(r->u.cast.operand, "int"));
    NB_EXPECT(type_is(ret_value(p, "d", 0), "double"));
    NB_EXPECT(type_is(ret_value(p, "h", 0), "half"));
    NB_EXPECT(type_is(ret_value(p, "g", 0), "float"));
    NB_EXPECT(type_is(ret_value(p, "u", 0), "uint"));
    r = ret_value(p, "s", 0); /* splat */
    NB_EXPECT(r && r->kind == NB_EX_CAST && type_is(r, "float3") && type_is(r->u.cast.operand, "float"));
    nb_program_free(p);
}

static void test_type_names(void) {
    EXPECT_CHECKS("void f() {\n"
                  "  bool b = true; int i = 1; uint u = 2u; float x = 1; double d = 2; half h = 1;\n"
                  "  float2 a2; int3 i3; uint4 u4; bool2 b2; half3 h3; double4 d4;\n"
                  "  float3x4 m; vector<float, 3> v3 = float3(1, 2, 3); matrix<float, 2, 2> m2;\n"
                  "  float arr[4]; float3 arr2[2][3]; int64_t big = 5; uint64_t ubig = 6;\n"
                  "}\n");
    nb_program *p = OK_PROG("static const int N = 2 * 3 + 1;\n"
                            "typedef float3 vec;\n"
                            "float f(vec v[N]) { vector<float, 3> w = v[0]; return w.x; }\n");
    if (!p) return;
    nb_decl *f = find_fn(p, "f");
    NB_EXPECT(f && f->u.func.params[0]->u.param.type && strcmp(f->u.func.params[0]->u.param.type->name, "float3[7]") == 0);
    nb_program_free(p);
    EXPECT_FAILS("void f() { floot x; }", "t.nb:1:12: error: unknown type 'floot'");
    EXPECT_FAILS("static const float K = 1.5;\nvoid f() { float a[K]; }",
                 "t.nb:2:20: error: array size must be a constant integer expression");
    EXPECT_FAILS("void f(int n) { float a[n]; }", "t.nb:1:25: error: array size must be a constant integer expression");
    EXPECT_FAILS("void f() { float a[0]; }", "error: array size must be positive, got 0");
    EXPECT_FAILS("void f() { vector<float, 5> v; }", "error: 'vector' size must be 1 to 4, got 5");
}

static void test_conversions(void) {
    EXPECT_CHECKS("float f(float3 v, int i, bool b, uint u) {\n"
                  "  float x = i; int j = x; uint k = i; float y = b; bool c = x;\n"
                  "  float3 w = 2; w = v * 2; w = 2 * v; w = v + i; w = v / x;\n"
                  "  float3x3 m = 1; m = m * 2; double d = x; half h = x;\n"
                  "  return v.x + u;\n"
                  "}\n");
    EXPECT_FAILS("float f(float3 v) {\n  return v;\n}",
                 "t.nb:2:10: error: cannot convert 'float3' to 'float' in return (implicit vector truncation");
    EXPECT_FAILS("void f(float4 v) { float3 w = v; }",
                 "t.nb:1:31: error: cannot convert 'float4' to 'float3' in initialization of 'w' (implicit vector truncation");
    EXPECT_FAILS("void f(float3 a, float2 b) { float3 c = a + b; }",
                 "t.nb:1:43: error: vector size mismatch in '+': 'float3' and 'float2'");
    EXPECT_FAILS("void f(float3x3 m, float3 v) { float3 r = m * v; }",
                 "error: invalid operands to binary '*' ('float3x3' and 'float3'); use mul()");
    EXPECT_FAILS("void f(float a) { int b = a & 1; }", "t.nb:1:29: error: operator '&' requires integer operands");
}

static void test_operators(void) {
    nb_program *p = OK_PROG("bool3 cmp(float3 a, float b) { return a < b; }\n"
                            "bool both(bool a, int b) { return a && b; }\n"
                            "float3 sel(bool3 c, float3 a, float b) { return c ? a : b; }\n"
                            "float pick(bool c, float a, int b) { return c ? a : b; }\n"
                            "int bits(int a, uint b) { int x = a << 2; x |= 3; x = ~x; return x ^ a; }\n"
                            "float inc(float x) { x++; --x; x += 2; x *= 3; return -x; }\n");
    if (!p) return;
    nb_expr *r = ret_value(p, "cmp", 0);
    NB_EXPECT(type_is(r, "bool3") && r->u.binary.rhs->kind == NB_EX_CAST && type_is(r->u.binary.rhs, "float3"));
    NB_EXPECT(type_is(ret_value(p, "sel", 0), "float3"));
    r = ret_value(p, "pick", 0);
    NB_EXPECT(type_is(r, "float") && r->u.ternary.else_e->kind == NB_EX_CAST);
    nb_program_free(p);
    EXPECT_FAILS("bool f(bool3 a, bool b) { return a && b; }",
                 "t.nb:1:34: error: operator '&&' requires scalar operands, got 'bool3'");
    EXPECT_FAILS("void f(float3 v) { if (v > 0) {} }", "t.nb:1:26: error: if condition must be a scalar, got 'bool3' (use any() or all())");
    EXPECT_FAILS("void f() { 1 = 2; }", "t.nb:1:12: error: expression is not assignable");
    EXPECT_FAILS("static const float K = 1;\nvoid f() { K = 2; }", "t.nb:2:12: error: cannot assign to constant 'K'");
    EXPECT_FAILS("void f(float3 v) { v.xx = float2(1, 2); }", "error: cannot assign to swizzle '.xx' with repeated components");
}

/* ---- names, scopes, structs --------------------------------------------------------------- */

static void test_scopes(void) {
    nb_program *p = OK_PROG("static const float G = 2;\n"
                            "float f(float x) {\n"
                            "  float y = x;\n"
                            "  { float x = 3; y += x; }\n"
                            "  for (int i = 0; i < 3; i++) { float x = i; y += x; }\n"
                            "  return y + x + G;\n"
                            "}\n");
    if (!p) return;
    nb_expr *r = ret_value(p, "f", 3);
    NB_EXPECT(r && r->kind == NB_EX_BINARY && r->u.binary.rhs->ref == NB_REF_GLOBAL);
    NB_EXPECT(r && r->u.binary.lhs->u.binary.rhs->ref == NB_REF_PARAM);
    NB_EXPECT(r && r->u.binary.lhs->u.binary.lhs->ref == NB_REF_LOCAL);
    nb_program_free(p);
    EXPECT_FAILS("float f() {\n  return y;\n}", "t.nb:2:10: error: use of undeclared identifier 'y'");
    EXPECT_FAILS("void f() { float a; int a; }", "t.nb:1:25: error: redefinition of 'a'");
    /* Slang: the body is a scope inside the parameters' one, a local may shadow a parameter */
    EXPECT_FAILS("void f(float a) { float a; float a; }", "t.nb:1:34: error: redefinition of 'a'");
    EXPECT_FAILS("float g(float x) { return x; }\nvoid f() { float y = g; }", "t.nb:2:22: error: 'g' is a function; call it");
    EXPECT_FAILS("void f() { float x = 1; x(2); }", "t.nb:1:25: error: 'x' is a variable, not a function");
    EXPECT_FAILS("float f() { float3 v; return v.w; }", "error: swizzle component 'w' is out of range for 'float3'");
    EXPECT_FAILS("float f() { float3 v; return v.xg; }", "error: no member named 'xg' in 'float3'");
    EXPECT_FAILS("float G = 1;", "t.nb:1:11: error: shader parameter 'G' cannot have an initializer (it is bound by the host)");
    /* a mutable static global is per thread of a [numthreads] entry point (check_kernel.c) */
    EXPECT_FAILS("static float G = 1;\nfloat f(float x) { G += x; return G; }",
                 "t.nb:2:7: error: 'f' uses the static variable 'G' but is not called from a [numthreads] compute entry point");
}

static void test_structs(void) {
    nb_program *p = OK_PROG("struct S : IDifferentiable {\n"
                            "  float a; float3 b;\n"
                            "  static const int K = 4;\n"
                            "  float get() { return a + b.x + K; }\n"
                            "  float twice() { return get() * 2; }\n"
                            "  [mutating] void set(float v) { a = v; this.b = v; }\n"
                            "};\n"
                            "float f(S s) {\n"
                            "  S t = {1.0, float3(1, 2, 3)};\n"
                            "  t.set(2);\n"
                            "  S u = S(1, float3(0));\n"
                            "  return s.get() + t.twice() + u.a + S.K + S::K + t.b.y;\n"
                            "}\n");
    if (!p) return;
    nb_decl *sd = p->main->decls[0];
    NB_EXPECT(sd->kind == NB_DECL_STRUCT && sd->u.strct.type && nb_type_is_differentiable(sd->u.strct.type));
    nb_decl *get = sd->u.strct.methods[0];
    nb_expr *r = get->u.func.body->u.block.items[0]->u.ret.value; /* (a + b.x) + K */
    nb_expr *a = r->u.binary.lhs->u.binary.lhs;
    NB_EXPECT(a->kind == NB_EX_MEMBER && a->ref == NB_REF_FIELD && a->index == 0 &&
              a->u.member.base->ref == NB_REF_PARAM && a->u.member.base->index == -1);
    NB_EXPECT(r->u.binary.rhs->kind == NB_EX_CAST && r->u.binary.rhs->u.cast.operand->ref == NB_REF_STATIC);
    nb_decl *tw = sd->u.strct.methods[1];
    nb_expr *call = tw->u.func.body->u.block.items[0]->u.ret.value->u.binary.lhs;
    NB_EXPECT(call->kind == NB_EX_CALL && call->ref == NB_REF_METHOD && call->decl == get &&
              call->u.call.callee->kind == NB_EX_MEMBER);
    NB_EXPECT(sd->u.strct.methods[2]->u.func.is_mutating);
    nb_program_free(p);
    EXPECT_FAILS("struct S { float a; };\nfloat f(S s) { return s.q; }", "t.nb:2:25: error: no member named 'q' in 'S'");
    EXPECT_FAILS("struct S { float a; void set(float v) { a = v; } };",
                 "t.nb:1:41: error: cannot modify 'this' in a non-mutating method (add [mutating])");
    /* fewer initializers than fields are allowed (Slang, as C); more are not */
    EXPECT_FAILS("struct S { float a; float b; };\nvoid f() { S s = {1.0, 2.0, 3.0}; }",
                 "t.nb:2:18: error: wrong number of initializers for 'S': expected 2, got 3");
    EXPECT_FAILS("struct S { S s; };", "error: field 's' makes struct 'S' contain itself");
    EXPECT_FAILS("struct S { float a; [mutating] void set(float v) { a = v; } };\nS mk() { S s = {1}; return s; }\n"
                 "void f() { mk().set(1); }",
                 "t.nb:3:12: error: [mutating] method 'set' needs an assignable object");
}

/* ---- functions, overloads ----------------------------------------------------------------- */

static void test_overloads(void) {
    nb_program *p = OK_PROG("float f(float x) { return x; }\n"
                            "float f(float3 x) { return x.x; }\n"
                            "double f(double x) { return x; }\n"
                            "float g(float a, float b = 2, int c = 3) { return a + b + c; }\n"
                            "float h() { return f(1) + f(float3(1, 2, 3)) + g(1) + g(1, 2); }\n"
                            "double k() { return f(1.0l); }\n");
    if (!p) return;
    nb_expr *r = ret_value(p, "h", 0); /* ((f(1) + f(v)) + g(1)) + g(1,2) */
    nb_expr *c1 = r->u.binary.lhs->u.binary.lhs->u.binary.lhs;
    nb_expr *c2 = r->u.binary.lhs->u.binary.lhs->u.binary.rhs;
    nb_expr *c3 = r->u.binary.lhs->u.binary.rhs;
    NB_EXPECT(c1->kind == NB_EX_CALL && c1->decl == p->main->decls[0]);
    NB_EXPECT(c2->kind == NB_EX_CALL && c2->decl == p->main->decls[1]);
    NB_EXPECT(c3->kind == NB_EX_CALL && c3->u.call.nargs == 3 && c3->u.call.args[2]->kind == NB_EX_INT);
    nb_expr *k = ret_value(p, "k", 0);
    NB_EXPECT(k->kind == NB_EX_CALL && k->decl == p->main->decls[2]);
    nb_program_free(p);
    EXPECT_FAILS("float f(float x, float y) { return x; }\n"
                 "float f(double x, double y) { return 1; }\n"
                 "void g() { f(float3(1, 2, 3), 1); }",
                 "t.nb:3:12: error: no matching function for call to 'f(float3, int)'\n");
    EXPECT_FAILS("float f(float x, float y) { return x; }\n"
                 "float f(double x, double y) { return 1; }\n"
                 "void g() { f(float3(1, 2, 3), 1); }",
                 "t.nb:1:7: note: candidate: float f(float x, float y)");
    EXPECT_FAILS("float f(float x, int y) { return x; }\n"
                 "float f(int x, float y) { return y; }\n"
                 "void g() { f(1, 1); }",
                 "t.nb:3:12: error: ambiguous call to 'f(int, int)'");
    EXPECT_FAILS("float f(float x, int y) { return x; }\nfloat f(int x, float y) { return y; }\nvoid g() { f(1, 1); }",
                 "t.nb:2:7: note: candidate: float f(int x, float y)");
    EXPECT_FAILS("float f(float x) { return x; }\nvoid g() { f(1, 2); }",
                 "t.nb:2:12: error: no matching function for call to 'f(int, int)'");
    EXPECT_FAILS("void f(float x, float y = 1, float z) {}", "error: parameter 'z' needs a default value");
}

static void test_function_rules(void) {
    EXPECT_CHECKS("void inc(inout float x) { x += 1; }\n"
                  "void set(out float x) { x = 1; }\n"
                  "float f() { float a = 0; inc(a); set(a); float3 v; set(v.x); float arr[2]; inc(arr[1]); return a; }\n"
                  "void v() { return; }\n"
                  "float early(float x) { if (x > 0) return 1; else return 2; }\n"
                  "float loop() { while (true) { return 1; } }\n"
                  "int sw(int x) { switch (x) { case 0: return 1; default: return 2; } }\n");
    EXPECT_FAILS("void set(out float x) { x = 1; }\nvoid f() { set(1.0); }",
                 "t.nb:2:16: error: argument 1 of 'set' must be assignable (it is an out parameter)");
    EXPECT_FAILS("void inc(inout float x) { x += 1; }\nvoid f() { int i; inc(i); }",
                 "t.nb:2:19: error: no matching function for call to 'inc(int)'");
    EXPECT_FAILS("float f(float x) {\n  if (x > 0) return 1;\n}",
                 "t.nb:1:7: error: control reaches the end of non-void function 'f' (missing return)");
    EXPECT_FAILS("float f(float x) { while (x > 0) { return 1; } }",
                 "error: control reaches the end of non-void function 'f' (missing return)");
    EXPECT_FAILS("void f() { return 1; }", "t.nb:1:19: error: void function 'f' cannot return a value");
    EXPECT_FAILS("float f() { return; }", "t.nb:1:13: error: non-void function 'f' must return a value");
    EXPECT_FAILS("float f(float x) { return f(x); }", "t.nb:1:27: error: recursion is not supported: 'f' calls itself");
    EXPECT_FAILS("float f(float x);\nfloat g(float x) { return f(x); }\nfloat f(float x) { return g(x); }",
                 "error: recursion is not supported: 'g' calls itself via 'f'");
    EXPECT_FAILS("float a(float x) { return b(x); }\nfloat b(float x) { return c(x); }\nfloat c(float x) { return a(x); }",
                 "t.nb:1:27: error: recursion is not supported: 'a' calls itself via 'b', 'c'");
    EXPECT_FAILS("float f(float x) { return x; }\nfloat f(float y) { return y; }",
                 "t.nb:2:7: error: redefinition of function 'f' with the same parameter types");
}

/* ---- control flow ------------------------------------------------------------------------- */

static void test_control_flow(void) {
    nb_program *p = OK_PROG("float f(float x) {\n"
                            "  float s = 0;\n"
                            "  for (int i = 0; i < 10; i++) { if (i == 3) continue; s += i; }\n"
                            "  [MaxIters(8)] while (s > 1) { s *= 0.5; if (s < 0.1) break; }\n"
                            "  for (int j = 10; j > 0; j -= 3) s += j;\n"
                            "  do { s -= 1; } while (s > 0);\n"
                            "  for (int k = 0; k < 4; k++) { k += 0; }\n"
                            "  switch (int(x)) { case 0: case 1: s = 1; break; case 2u: s = 2; default: s = 3; }\n"
                            "  return s;\n"
                            "}\n");
    if (!p) return;
    NB_EXPECT(body_stmt(p, "f", 1)->max_iters == 10);
    NB_EXPECT(body_stmt(p, "f", 2)->max_iters == 8);
    NB_EXPECT(body_stmt(p, "f", 3)->max_iters == 4);
    NB_EXPECT(body_stmt(p, "f", 4)->max_iters == -1);
    NB_EXPECT(body_stmt(p, "f", 5)->max_iters == -1); /* k written in the body */
    nb_program_free(p);
    EXPECT_FAILS("void f() { break; }", "t.nb:1:12: error: 'break' outside of a loop or switch");
    EXPECT_FAILS("void f(int x) { switch (x) { case 1: continue; } }", "t.nb:1:38: error: 'continue' outside of a loop");
    EXPECT_FAILS("void f(float x) { switch (x) { default: break; } }", "t.nb:1:27: error: switch value must be an integer, got 'float'");
    EXPECT_FAILS("void f(int x, int y) { switch (x) { case y: break; } }", "t.nb:1:42: error: case label must be a constant integer");
    EXPECT_FAILS("void f(int x) { switch (x) { case 1: break; case 1: break; } }", "t.nb:1:50: error: duplicate case value 1");
    EXPECT_FAILS("void f(int x) { switch (x) { default: break; default: break; } }", "error: multiple default labels in one switch");
    EXPECT_FAILS("void f(float x) { [MaxIters(0)] while (x > 0) x -= 1; }", "error: [MaxIters] needs a positive constant integer");
}

/* ---- intrinsics --------------------------------------------------------------------------- */

static void test_intrinsics(void) {
    NB_EXPECT(nb_intrinsic_lookup("smoothstep") == NB_INTR_SMOOTHSTEP);
    NB_EXPECT(nb_intrinsic_lookup("nope") < 0);
    NB_EXPECT(strcmp(nb_intrinsic_name(NB_INTR_DOT), "dot") == 0);
    NB_EXPECT(nb_intrinsic_get(NB_INTR_FLOOR)->diff == NB_IDIFF_ZERO);
    NB_EXPECT(nb_intrinsic_get(NB_INTR_DISPATCH_ID)->flags & NB_IFLAG_KERNEL);
    nb_program *p = OK_PROG("float3 f(float3 a, float3 b, float s, int i, float3x3 m, float4x3 m43) {\n"
                            "  float x = exp(s) + exp2(s) + log(s) + log2(s) + sqrt(s) + rsqrt(s) + sin(s) + cos(s) + tan(s);\n"
                            "  x += asin(s) + acos(s) + atan(s) + atan2(s, 1) + sinh(s) + cosh(s) + tanh(s) + pow(s, 2);\n"
                            "  x += abs(s) + min(s, 1) + max(s, i) + clamp(s, 0, 1) + lerp(s, 1, 0.5) + floor(s) + ceil(s);\n"
                            "  x += frac(s) + fmod(s, 2) + sign(s) + step(0.5, s) + smoothstep(0, 1, s) + saturate(s);\n"
                            "  x += dot(a, b) + length(a) + distance(a, b) + determinant(m) + sin(i);\n"
                            "  float3 n = normalize(a) + cross(a, b) + select(a > b, a, b) + mul(m, a) + mul(a, m);\n"
                            "  float4 v4 = mul(m43, a); float3x4 t = transpose(m43); float3 w = lerp(a, b, s);\n"
                            "  bool anyb = any(a > 0) || all(isnan(a)) || any(isinf(a)); uint bits = asuint(s); float back = asfloat(bits);\n"
                            "  int k = abs(i) + min(i, 2); int ki = asint(s);\n"
                            "  return n * x + w;\n"
                            "}\n");
    if (!p) return;
    nb_expr *l = var_init(p, "f", "w");
    NB_EXPECT(l && l->kind == NB_EX_CALL && l->ref == NB_REF_INTRINSIC && l->index == NB_INTR_LERP && type_is(l, "float3"));
    NB_EXPECT(l && l->u.call.args[2]->kind == NB_EX_CAST && type_is(l->u.call.args[2], "float3"));
    nb_expr *sinint = body_stmt(p, "f", 4)->u.expr.expr->u.assign.rhs->u.binary.rhs;
    NB_EXPECT(sinint->index == NB_INTR_SIN && type_is(sinint, "float") && sinint->u.call.args[0]->kind == NB_EX_CAST);
    nb_expr *m1 = var_init(p, "f", "v4");
    if (!m1) return;
    NB_EXPECT(m1->index == NB_INTR_MUL && type_is(m1, "float4"));
    nb_program_free(p);
    EXPECT_FAILS("float f(float3 a) { return cross(a.xy, a.xy); }", "error: 'cross' needs 3-component vectors, got 'float2'");
    EXPECT_FAILS("float f(float3 a) { return dot(a, a.xy); }", "error: vector size mismatch in call to 'dot': 'float3' and 'float2'");
    EXPECT_FAILS("float f(float a) { return sin(a, a); }", "t.nb:1:27: error: 'sin' takes 1 argument, got 2");
    EXPECT_FAILS("float f(float3x3 m, float4 v) { return mul(m, v).x; }", "error: mul: incompatible operands 'float3x3' and 'float4'");
    EXPECT_FAILS("struct S { float a; };\nfloat f(S s) { return sin(s); }", "error: no matching function for call to 'sin(S)'");
}

static void test_kernels_and_tensors(void) {
    nb_program *p = OK_PROG("[Kernel] void k(Tensor<float, 2> t, DiffTensor<float, 1> g, Tensor<float3, 1> v, float scale) {\n"
                            "  uint3 id = dispatch_id();\n"
                            "  uint3 a = cudaThreadIdx() + cudaBlockIdx() * cudaBlockDim();\n"
                            "  t[id.x, id.y] = t[int2(id.xy)] * scale;\n"
                            "  float3 e = v[id.x];\n"
                            "  atomicAdd(g[0], e.x);\n"
                            "}\n");
    if (!p) return;
    nb_decl *k = find_fn(p, "k");
    NB_EXPECT(k && k->u.func.is_kernel);
    nb_expr *as = body_stmt(p, "k", 2)->u.expr.expr;
    NB_EXPECT(as->kind == NB_EX_ASSIGN && as->u.assign.lhs->is_lvalue && type_is(as->u.assign.lhs, "float"));
    NB_EXPECT(as->u.assign.lhs->u.index.indices[0]->kind == NB_EX_CAST); /* uint -> int */
    nb_program_free(p);
    EXPECT_FAILS("void f() { uint3 i = dispatch_id(); }",
                 "t.nb:1:6: error: 'f' reads the thread indices (cudaThreadIdx(), cudaBlockIdx(), cudaBlockDim() or "
                 "dispatch_id(), directly or through a callee) but is not called from a [Kernel] / [CudaKernel] function");
    EXPECT_FAILS("[Kernel] float k(Tensor<float, 1> t) { return 1; }", "error: [Kernel] function 'k' must return void");
    EXPECT_FAILS("void f(Tensor<float, 2> t) { float x = t[0]; }", "t.nb:1:41: error: 'Tensor<float,2>' needs 2 indices, got 1");
    EXPECT_FAILS("void f(Tensor<float, 1> t, float y) { atomicAdd(y, 1); }",
                 "t.nb:1:49: error: the first argument of 'atomicAdd' must be a tensor element");
    EXPECT_FAILS("void f(Tensor<float, 1> t) { float x = t[1.5]; }", "error: index must be an integer, got 'float'");
}

/* ---- autodiff shapes ---------------------------------------------------------------------- */

static void test_autodiff(void) {
    nb_program *p = OK_PROG("[Differentiable] float f(float x, no_diff float y) { return x * y; }\n"
                            "[Differentiable] float3 g(float3 v) { return v * detach(v.x) + no_diff(v); }\n"
                            "DifferentialPair<float> fd(DifferentialPair<float> dp, DifferentialPair<float> dy) {\n"
                            "  return diffPair(dp.p * dy.p, dp.d * dy.p + dp.p * dy.d); }\n"
                            "[ForwardDerivative(fd)] float h(float x, float y) { return x * y; }\n"
                            "[BackwardDerivativeOf(h)] void hb(inout DifferentialPair<float> x, inout DifferentialPair<float> y, float d) {}\n"
                            "void test() {\n"
                            "  DifferentialPair<float> dx = diffPair(1.0, 1.0);\n"
                            "  DifferentialPair<float> r = fwd_diff(f)(dx, 2.0);\n"
                            "  float pr = r.p + r.d + r.getPrimal() + r.getDifferential();\n"
                            "  bwd_diff(f)(dx, 2.0, 1.0);\n"
                            "  var dv = diffPair(float3(1, 2, 3));\n"
                            "  DifferentialPair<float3> rv = fwd_diff(g)(dv);\n"
                            "  bwd_diff(g)(dv, float3(1));\n"
                            "}\n");
    if (!p) return;
    nb_decl *f = find_fn(p, "f"), *h = find_fn(p, "h"), *fd = find_fn(p, "fd"), *hb = find_fn(p, "hb");
    NB_EXPECT(f->u.func.differentiable);
    NB_EXPECT(h->u.func.differentiable && h->u.func.fwd_derivative == fd && h->u.func.bwd_derivative == hb);
    nb_expr *fw = body_stmt(p, "test", 1)->u.var.vars[0]->u.var.init;
    NB_EXPECT(fw->kind == NB_EX_CALL && fw->ref == NB_REF_INTRINSIC && fw->index == NB_INTR_FWD_DIFF && fw->decl == f);
    NB_EXPECT(type_is(fw, "DifferentialPair<float>"));
    NB_EXPECT(fw->u.call.callee->kind == NB_EX_CALL && fw->u.call.callee->u.call.args[0]->ref == NB_REF_FUNCTION);
    nb_expr *bw = body_stmt(p, "test", 3)->u.expr.expr;
    NB_EXPECT(bw->index == NB_INTR_BWD_DIFF && type_is(bw, "void") && bw->u.call.nargs == 3);
    nb_program_free(p);
    EXPECT_FAILS("float f(float x) { return x; }\nvoid g() { var d = diffPair(1.0); fwd_diff(f)(d); }",
                 "t.nb:2:44: error: 'f' is not differentiable (add [Differentiable])");
    EXPECT_FAILS("[Differentiable] float f(float x) { return x; }\nvoid g() { fwd_diff(f)(1.0); }",
                 "t.nb:2:12: error: no matching function for call to 'fwd_diff(f)(float)'");
    EXPECT_FAILS("[Differentiable] float f(float x) { return x; }\nvoid g() { var d = diffPair(1.0); bwd_diff(f)(d); }",
                 "error: no matching function for call to 'bwd_diff(f)(DifferentialPair<float>)'");
    EXPECT_FAILS("[Differentiable] float f(float x) { return x; }\nvoid g() { bwd_diff(f)(diffPair(1.0), 1.0); }",
                 "error: argument 1 of 'bwd_diff(f)' must be assignable (it is an inout parameter)");
    EXPECT_FAILS("void g() { var d = diffPair(1); int q = d.q; }", "error: no member named 'q' in 'DifferentialPair<float>'");
    EXPECT_FAILS("[ForwardDerivative(nothere)] float h(float x) { return x; }", "t.nb:1:20: error: unknown function 'nothere' in [ForwardDerivative]");
    EXPECT_FAILS("float fd(DifferentialPair<float> dp, float y) { return dp.p * y + dp.d; }\n"
                 "[ForwardDerivative(fd)] float h(float x, float y) { return x * y; }",
                 "t.nb:2:20: error: 'fd' does not have the signature of the forward derivative of 'h'");
}

/* ---- modules, constants, reflection ------------------------------------------------------- */

static void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    if (!f) return;
    fputs(text, f);
    fclose(f);
}

static void test_imports(void) {
    char dir[] = "/tmp/nb_test_check_XXXXXX";
    if (!mkdtemp(dir)) NB_SKIP("no temp dir");
    char a[256], b[256], c[256], m[256], cy1[256], cy2[256], lib[256], libdir[200];
    snprintf(a, sizeof a, "%s/util.nb", dir);
    snprintf(b, sizeof b, "%s/main.nb", dir);
    snprintf(c, sizeof c, "%s/missing.nb", dir);
    snprintf(m, sizeof m, "%s/mid.nb", dir);
    snprintf(cy1, sizeof cy1, "%s/cy1.nb", dir);
    snprintf(cy2, sizeof cy2, "%s/cy2.nb", dir);
    snprintf(libdir, sizeof libdir, "%s/lib", dir);
    snprintf(lib, sizeof lib, "%s/lib/extra.nb", dir);
    mkdir(libdir, 0700);
    write_file(a, "struct P { float3 pos; float w; };\nstatic const int UN = 3;\nfloat twice(float x) { return 2 * x; }\n");
    write_file(m, "import util;\nfloat thrice(float x) { return twice(x) + x; }\n");
    write_file(lib, "float extra(float x) { return x + 1; }\n");
    write_file(b, "import util;\nimport mid;\nimport extra;\n"
                  "float f(P p, float s[UN]) { return twice(p.w) + thrice(s[0]) + extra(p.pos.x); }\n");
    write_file(c, "import nothere;\nfloat f() { return 1; }\n");
    write_file(cy1, "import cy2;\nfloat a() { return 1; }\n");
    write_file(cy2, "import cy1;\nfloat b() { return 1; }\n");
    const char *paths[1] = {libdir};
    nb_compile_opts opts = {.search_paths = paths, .nsearch = 1};
    nb_program *p = NULL;
    NB_EXPECT_OK(nb_program_compile_file(b, &opts, &p));
    if (p) {
        NB_EXPECT(p->nmodules == 4 && p->modules[p->nmodules - 1] == p->main);
        const nb_fn_info *infos;
        int n;
        NB_EXPECT_OK(nb_program_functions(p, "f", &infos, &n));
        NB_EXPECT(n == 1 && infos[0].nleaves == 3 && strcmp(infos[0].leaves[0].path, "p.pos") == 0 &&
                  infos[0].leaves[0].value_rank == 1 && infos[0].leaves[0].value_shape[0] == 3 &&
                  strcmp(infos[0].leaves[1].path, "p.w") == 0 && infos[0].leaves[2].value_shape[0] == 3);
        NB_EXPECT(n == 1 && infos[0].param_first_leaf[1] == 2 && infos[0].has_result);
        nb_program_free(p);
    }
    NB_EXPECT_ERR(nb_program_compile_file(c, &opts, &p), NB_ERR_COMPILE, "missing.nb:1:1: error: cannot find module 'nothere'");
    NB_EXPECT_ERR(nb_program_compile_file(cy1, &opts, &p), NB_ERR_COMPILE, "error: import cycle: 'cy1' imports 'cy2' imports 'cy1'");
    NB_EXPECT_ERR(nb_program_compile_file("/nonexistent/x.nb", &opts, &p), NB_ERR_IO, "x.nb");
    unlink(a); unlink(b); unlink(c); unlink(m); unlink(cy1); unlink(cy2); unlink(lib);
    rmdir(libdir);
    rmdir(dir);
}

static void test_constants(void) {
    nb_program *p = OK_PROG("extern static const int N = 4;\n"
                            "extern static const float SCALE = 1.5;\n"
                            "static const int M = N * 2;\n"
                            "float f(float a[M]) { return a[0] * SCALE; }\n");
    if (!p) return;
    const nb_fn_info *infos;
    int n;
    NB_EXPECT_OK(nb_program_functions(p, "f", &infos, &n));
    NB_EXPECT(n == 1 && infos[0].leaves[0].value_shape[0] == 8);
    NB_EXPECT(p->nconstants == 2);
    NB_EXPECT_OK(nb_program_set_constant(p, "N", 3.7)); /* -> 3 */
    NB_EXPECT_OK(nb_program_functions(p, "f", &infos, &n));
    NB_EXPECT(n == 1 && infos[0].leaves[0].value_shape[0] == 6);
    nb_decl *g = p->main->decls[0];
    NB_EXPECT(g->u.var.has_const && g->u.var.const_i == 3);
    NB_EXPECT_OK(nb_program_set_constant(p, "SCALE", 2.0));
    NB_EXPECT(p->main->decls[1]->u.var.const_f == 2.0);
    NB_EXPECT_ERR(nb_program_set_constant(p, "nope", 1), NB_ERR_NOT_FOUND, "no link-time constant 'nope'");
    NB_EXPECT_ERR(nb_program_set_constant(p, "N", -1), NB_ERR_COMPILE, "array size must be positive");
    NB_EXPECT(p->main->decls[0]->u.var.const_i == 3); /* unchanged after the failed rebuild */
    NB_EXPECT_ERR(nb_program_functions(p, "g", &infos, &n), NB_ERR_NOT_FOUND, "callable functions: f");
    nb_program_free(p);
}

static void test_reflection(void) {
    nb_program *p = OK_PROG("struct S { float3 pos; float scale; };\n"
                            "float3 f(S s, float3x4 m, float a[4], inout float3 acc, no_diff float k, int i) { return s.pos; }\n"
                            "float f(float x) { return x; }\n"
                            "[Kernel] void k(Tensor<float, 2> t, DiffTensor<float3, 1> g) {}\n");
    if (!p) return;
    const nb_fn_info *in;
    int n;
    NB_EXPECT_OK(nb_program_functions(p, "f", &in, &n));
    NB_EXPECT(n == 2);
    if (n == 2) {
        NB_EXPECT(in[0].nparams == 6 && in[0].nleaves == 7);
        NB_EXPECT(in[0].leaves[2].value_rank == 2 && in[0].leaves[2].value_shape[0] == 3 && in[0].leaves[2].value_shape[1] == 4);
        NB_EXPECT(in[0].leaves[3].value_rank == 1 && in[0].leaves[3].value_shape[0] == 4);
        NB_EXPECT(in[0].leaves[4].dir == 2 && in[0].param_dirs[3] == 2);
        NB_EXPECT(in[0].leaves[5].differentiable == 0 && in[0].leaves[0].differentiable == 1);
        NB_EXPECT(in[0].leaves[6].scalar == NB_I32 && in[0].leaves[6].differentiable == 0);
        NB_EXPECT(in[0].has_result && in[0].result.value_rank == 1 && in[0].result.scalar == NB_F32);
        NB_EXPECT(strcmp(in[0].signature, "float3 f(S s, float3x4 m, float[4] a, inout float3 acc, no_diff float k, int i)") == 0);
        NB_EXPECT(in[1].overload == 1 && in[1].nleaves == 1);
    }
    NB_EXPECT_OK(nb_program_functions(p, "k", &in, &n));
    NB_EXPECT(n == 1 && in[0].is_kernel && in[0].leaves[0].kind == NB_LEAF_TENSOR && in[0].leaves[0].tensor_rank == 2 &&
              in[0].leaves[1].diff_tensor && in[0].leaves[1].value_shape[0] == 3 && in[0].leaves[1].differentiable);
    nb_program_free(p);
}

/* ---- value generics ------------------------------------------------------------------------ */

static nb_decl *find_decl(nb_program *p, int kind, const char *name) {
    for (int i = 0; p && i < p->main->ndecls; i++) {
        nb_decl *d = p->main->decls[i];
        if (d && (int)d->kind == kind && d->name && strcmp(d->name, name) == 0) return d;
    }
    return NULL;
}

static void test_generics(void) {
    nb_program *p = OK_PROG("struct MLP<let W : int, let L : int> {\n"
                            "  float w[L][W][W]; float b[L][W];\n"
                            "  static const int kWidth = W;\n"
                            "  float eval(float x[W]) {\n"
                            "    float h[W] = x;\n"
                            "    for (int l = 0; l < L; l++) { float o[W]; for (int i = 0; i < W; i++) o[i] = b[l][i] + h[i]; h = o; }\n"
                            "    return sum(h);\n"
                            "  }\n"
                            "  MLP twice() { MLP m = this; return m; }\n"
                            "};\n"
                            "float sum<let N : int>(float x[N]) { float s = 0; for (int i = 0; i < N; i++) s += x[i]; return s; }\n"
                            "typedef MLP<16, 3> Net;\n"
                            "float f(Net n, MLP<2, 1> m, float x[16]) { return n.twice().eval(x) + sum<2>(m.b[0]) + Net.kWidth + MLP<2,1>::kWidth; }\n");
    if (!p) return;
    nb_decl *net = find_decl(p, NB_DECL_STRUCT, "MLP<16,3>");
    nb_decl *small = find_decl(p, NB_DECL_STRUCT, "MLP<2,1>");
    NB_EXPECT(net && small && net != small);
    if (net && small) {
        NB_EXPECT(net->u.strct.type && strcmp(net->u.strct.type->name, "MLP<16,3>") == 0);
        NB_EXPECT(net->u.strct.generic_of == p->main->decls[0] && net->u.strct.ngargs == 2 &&
                  net->u.strct.gargs[0] == 16 && net->u.strct.gargs[1] == 3);
        NB_EXPECT(strcmp(net->u.strct.fields[0]->u.var.type->name, "float[3][16][16]") == 0);
        nb_decl *k = net->u.strct.statics[0];
        NB_EXPECT(k->u.var.has_const && k->u.var.const_i == 16);
        /* the loop over layers is bounded by L: max_iters 3 (1 in MLP<2,1>) */
        nb_stmt *loop = net->u.strct.methods[0]->u.func.body->u.block.items[1];
        NB_EXPECT(loop->kind == NB_ST_FOR && loop->max_iters == 3);
        loop = small->u.strct.methods[0]->u.func.body->u.block.items[1];
        NB_EXPECT(loop->kind == NB_ST_FOR && loop->max_iters == 1);
        /* `MLP` inside the struct is the instantiation */
        NB_EXPECT(net->u.strct.methods[1]->u.func.ret->resolved == net->u.strct.type);
    }
    /* sum<16> inferred from eval's float[16], sum<2> written; both ordinary functions */
    nb_decl *s16 = find_decl(p, NB_DECL_FUNC, "sum<16>"), *s2 = find_decl(p, NB_DECL_FUNC, "sum<2>");
    NB_EXPECT(s16 && s2 && s16->u.func.generic_of && s16->u.func.ngparams == 0 &&
              strcmp(s2->u.func.params[0]->u.param.type->name, "float[2]") == 0);
    nb_expr *r = ret_value(p, "f", 0); /* ((a + sum<2>(…)) + kWidth) + kWidth */
    nb_expr *call = r ? r->u.binary.lhs->u.binary.lhs->u.binary.rhs : NULL;
    NB_EXPECT(call && call->kind == NB_EX_CALL && call->decl == s2 && call->u.call.callee->kind == NB_EX_NAME);
    /* reflection flattens instantiated structs into leaves; generics are not callable themselves */
    const nb_fn_info *in;
    int n;
    NB_EXPECT_OK(nb_program_functions(p, "f", &in, &n));
    NB_EXPECT(n == 1 && in[0].nleaves == 5);
    if (n == 1 && in[0].nleaves == 5) {
        NB_EXPECT(strcmp(in[0].leaves[0].path, "n.w") == 0 && in[0].leaves[0].value_rank == 3 &&
                  in[0].leaves[0].value_shape[0] == 3 && in[0].leaves[0].value_shape[2] == 16);
        NB_EXPECT(strcmp(in[0].leaves[3].path, "m.b") == 0 && in[0].leaves[3].value_shape[1] == 2);
        NB_EXPECT(strcmp(in[0].signature, "float f(MLP<16,3> n, MLP<2,1> m, float[16] x)") == 0);
    }
    NB_EXPECT_ERR(nb_program_functions(p, "sum", &in, &n), NB_ERR_NOT_FOUND, "callable functions: f");
    nb_program_free(p);

    /* defaults, uint parameters, inference through vectors, matrices and generic structs */
    EXPECT_CHECKS("struct A<let N : uint, let M : int = N * 2> { float v[M]; static const uint K = N; };\n"
                  "float g<let R : int, let C : int>(matrix<float, R, C> m) { return m[R - 1][C - 1]; }\n"
                  "float h<let N : int>(vector<float, N> v) { return v[N - 1]; }\n"
                  "float k<let N : uint, let M : int>(A<N, M> a) { return a.v[M - 1] + N; }\n"
                  "float f(A<3> a) { float3 v = 1; float2x3 m = 0; return g(m) + h(v) + k(a) + A<3>.K + a.v[5]; }\n");

    /* diagnostics */
    const char *mlp = "struct M<let W : int, let L : int> { float w[L][W]; };\n";
    static const struct { const char *tail; const char *msg; } cases[] = {
        {"void f() { M<4> m; }", "t.nb:2:12: error: 'M' takes 2 generic arguments (W, L), got 1"},
        {"void f() { M<4, 2, 1> m; }", "t.nb:2:12: error: 'M' takes 2 generic arguments, got 3"},
        {"void f(int n) { M<n, 1> m; }", "t.nb:2:19: error: generic argument 1 of 'M' must be a constant integer"},
        {"void f() { M<float, 1> m; }", "t.nb:2:14: error: generic argument 1 of 'M' must be an integer value, not a type"},
        {"void f() { M<2.5, 1> m; }", "t.nb:2:14: error: generic argument 1 of 'M' must be a constant integer"},
        {"void f() { M<4, 1 - 1> m; }", "t.nb:1:46: error: array size must be positive, got 0"},
        {"void f() { M<4, 1 - 1> m; }", "t.nb:2:12: note: in instantiation of 'M<4,0>' requested here"},
        {"void f(M m) {}", "t.nb:2:8: error: generic struct 'M' needs generic arguments: 'M<W, L>'"},
        {"typedef M<2, 2> Net;\nfloat f() { return Net.q; }", "t.nb:3:24: error: 'M<2,2>' has no static member 'q'"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char src[512];
        snprintf(src, sizeof src, "%s%s", mlp, cases[i].tail);
        expect_fail(src, cases[i].msg, __LINE__);
    }
    EXPECT_FAILS("struct L<let N : int> { L<N + 1> next; };\nvoid f() { L<1> l; }",
                 "t.nb:1:25: error: instantiating 'L<65>' nests more than 64 generic instantiations (does 'L' "
                 "instantiate itself without end?)");
    EXPECT_FAILS("struct L<let N : int> { L<N + 1> next; };\nvoid f() { L<1> l; }",
                 "t.nb:2:12: note: in instantiation of 'L<1>' requested here");
    EXPECT_FAILS("float g<let N : int>() { return g<N + 1>(); }\nvoid f() { g<1>(); }",
                 "t.nb:1:33: error: instantiating 'g<65>' nests more than 64 generic instantiations");
    EXPECT_FAILS("struct S<let N : int> { S s; };\nvoid f() { S<1> s; }",
                 "t.nb:1:27: error: field 's' makes struct 'S<1>' contain itself");
    EXPECT_FAILS("float s<let N : int>(float x[N]) { return x[0]; }\nvoid f() { s(1.0); }",
                 "t.nb:2:12: error: cannot infer generic parameter 'N' of 's' from the arguments (write s<…>(…))");
    EXPECT_FAILS("float s<let N : int>(float x[N], float y[N]) { return x[0]; }\nvoid f() { float a[2]; float b[3]; s(a, b); }",
                 "t.nb:2:36: error: conflicting values for generic parameter 'N' of 's': 2 and 3");
    EXPECT_FAILS("float s<let N : int>(float x[N]) { return x[0]; }\nvoid f() { float a[2]; s<int>(a); }",
                 "t.nb:2:26: error: generic argument 1 of 's' must be an integer value, not a type");
    EXPECT_FAILS("float s<let N : int>(float x[N]) { return x[0]; }\nvoid f() { float a[2]; s<1, 2>(a); }",
                 "t.nb:2:24: error: 's' takes 1 generic argument, got 2");
    EXPECT_FAILS("float s<let N : int>(float x[N]) { return s(x); }\nvoid f() { float a[2]; s(a); }",
                 "t.nb:1:43: error: recursion is not supported: 's<2>' calls itself");
    EXPECT_FAILS("struct S<let W : int> { float get() { int W = 2; return W; } };\nvoid f() { S<2> s; }",
                 "t.nb:1:43: error: declaration of 'W' shadows a generic parameter of 'S'");
    EXPECT_FAILS("struct S<let W : float> {};", "t.nb:1:18: error: generic parameter 'W' must have type 'int', 'uint' or 'bool'");
    EXPECT_FAILS("struct S<let W : uint> {};\nvoid f() { S<-1> s; }",
                 "t.nb:2:14: error: generic argument 1 of 'S' is out of range for 'uint': -1");
    /* generic methods are checked like generic functions */
    EXPECT_FAILS("struct S { float g<let N : float>() { return 1.0; } };",
                 "t.nb:1:28: error: generic parameter 'N' must have type 'int', 'uint' or 'bool'");
    EXPECT_FAILS("float s<let N : int>(float x[N]) { return x[0]; }\nvoid f() { float a[2]; s<3>(a); }",
                 "t.nb:2:24: error: conflicting values for generic parameter 'N' of 's': 3 and 2");
    /* g is not generic, so `g<2>(1.0)` is `(g < 2) > 1.0` */
    EXPECT_FAILS("float g(float x) { return x; }\nvoid f() { g<2>(1.0); }", "t.nb:2:12: error: 'g' is a function; call it with arguments");
    EXPECT_FAILS("struct S { float a; };\nvoid f() { S<2> s; }", "t.nb:2:12: error: 'S' is not a generic type");

    /* garbage around generics: diagnostics, never a crash */
    static const char *junk[] = {
        "struct M<let W : int> { float w[W]; };\nvoid f() { M<1 / 0> m; }",
        "struct M<let W : int> { float w[W]; };\nvoid f() { M<> m; }",
        "struct M<let W : int = W> { };\nvoid f() { M m; }",
        "struct M<let W : int, let W : int> { };\nvoid f() { M<1, 2> m; }",
        "float g<let N : int>(float x[N]) { return x[0]; }\nfloat f() { return fwd_diff(g)(1.0); }",
        "float g<let N : int>(float x[N]) { return N; }\nfloat f() { return g; }",
        "float g<let N : int>(float x[N]) { return N; }\nvoid f() { g<N>(); }",
        "float g<let N : int>(float x[N]);\nfloat f() { float a[1]; return g(a); }",
        "struct M<let W : int> { float w[W]; M<W> self; };\nvoid f() { M<3> m; }",
        "struct M<let W : int> { static const int K = M<W - 1>.K + 1; };\nint f() { return M<5>.K; }",
        "float g<let N : int>(vector<float, N> v) { return 0; }\nfloat f() { return g(float4(1)) + g(float2(1)); }",
        "struct M<let W : int> {};\nvoid f() { M<1000000000000> m; }",
        "float g<let N : int>() { return N; }\n[ForwardDerivative(g)] float f(float x) { return x; }",
    };
    for (size_t i = 0; i < sizeof junk / sizeof junk[0]; i++) {
        p = NULL;
        nb_status st = nb_program_compile_source("t.nb", junk[i], NULL, &p);
        NB_EXPECT(st == NB_OK || st == NB_ERR_COMPILE);
        nb_program_free(p);
    }
}

/* ---- robustness --------------------------------------------------------------------------- */

static void test_malformed_programs(void) {
    /* Each must fail with exactly this first error (and never crash). */
    static const struct { const char *src; const char *msg; } cases[] = {
        {"float f() { return g(1); }", "t.nb:1:20: error: use of undeclared function 'g'"},
        {"float f() { return sin(); }", "t.nb:1:20: error: 'sin' takes 1 argument, got 0"},
        {"float f() { return x.y.z; }", "t.nb:1:20: error: use of undeclared identifier 'x'"},
        {"float f(float x) { return x[0]; }", "t.nb:1:28: error: cannot index a value of type 'float'"},
        {"void f() { int a[2] = {1, 2, 3}; }", "t.nb:1:23: error: wrong number of initializers for 'int[2]': expected 2, got 3"},
        {"void f() { float3 v = float3(1, 2); }", "t.nb:1:23: error: wrong number of components in 'float3' constructor: expected 3, got 2"},
        {"void f() { float x = {1, 2}; }", "error: wrong number of initializers for 'float'"},
        {"void f() { Tensor<float> t; }", "error: 'Tensor' takes 2 generic arguments"},
        {"void f() { DifferentialPair<int> p; }", "error: 'DifferentialPair' needs a differentiable type, got 'int'"},
        {"struct S { float a; };\nvoid f() { S s; s(); }", "t.nb:2:17: error: 's' is a variable, not a function"},
        {"void f() { float x = S.k; }", "t.nb:1:22: error: use of undeclared identifier 'S'"},
        {"struct S { float a; };\nvoid f() { float x = S.k; }", "t.nb:2:24: error: 'S' has no static member 'k'"},
        {"void f(float x) { x.foo(); }", "error: no member function named 'foo' in 'float'"},
        {"void f(void x) {}", "error: parameter 'x' has type void"},
        {"float3 f() { return float3(1, 2, 3) ? float2(1, 1) : 0; }", "t.nb:1:37: error: vector condition 'float3' needs operands with 3 components, got 'float2'"},
        {"typedef A B;\ntypedef B A;\nvoid f(A a) {}", "error: type alias"},
        {"static const int A = B;\nstatic const int B = A;", "error: the value of 'A' depends on itself"},
        {"void f() { int x = 1; x.y = 2; }", "t.nb:1:25: error: swizzle component 'y' is out of range for 'int'"},
        {"[mutating] void f() {}", "t.nb:1:2: error: [mutating] only applies to struct methods"},
        {"float f(float x) { return fwd_diff(x)(1); }", "error: 'fwd_diff' needs a user function; 'x' is not one"},
        {"float f(float x) { return fwd_diff(f); }", "error: 'fwd_diff(f)' must be called with f's arguments"},
        {"float f(float3 x) { return x.xyzwx; }", "error: no member named 'xyzwx' in 'float3'"},
        {"void f() { var x; }", "error: cannot infer the type of 'x'"},
        {"void f() { const float x; }", "error: const variable 'x' needs an initializer"},
        {"float3 f(float2 x) { return (float3)x; }", "t.nb:1:29: error: cannot convert 'float2' to 'float3' in cast"},
        /* (f({1}) takes the parameter's type since initializer-list arguments landed) */
        {"void f() { float y = {1} + 2.0; }", "t.nb:1:22: error: an initializer list needs a declared type"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) expect_fail(cases[i].src, cases[i].msg, __LINE__);

    /* Error-typed expressions do not cascade: one error only. */
    nb_program *p = NULL;
    nb_source_set *unused = NULL;
    (void)unused;
    NB_EXPECT(nb_program_compile_source("t.nb", "float f() { float3 v = undefined_a + 1; return v.x * 2 + sin(v).y; }", NULL,
                                        &p) == NB_ERR_COMPILE);
    const char *msg = nb_last_error();
    NB_EXPECT(strstr(msg, "undefined_a") && !strstr(strstr(msg, "undefined_a") + 1, "error:"));

    /* Garbage: must not crash (any diagnostics are fine). */
    static const char *junk[] = {
        "float f( { return ; }", "struct { }", "void f() { for (;;) {} }", "float f() { return ((((1)))); }",
        "void f() { switch (1) {} }", "void f() { int a[3]; a[5] = 1; }", "void f() { float x = 1 / 0; }",
        "import ;", "struct S { float a; } void f(S s = {1}) {}", "void f() { fwd_diff(f)(); }",
        "[Differentiable] float f(float x) { return bwd_diff(f)(x); }", "void f() { diffPair(); detach(); mul(1); }",
        "extern static const float3 V = float3(1, 2, 3);", "void f(Tensor<float, 9> t) {}",
        "float f(float x = y) { return x; }", "void f() { this.x = 1; }", "struct S { void m() { this = this; } };",
        "struct S { static const int K = K; };", "void f() { int x = 1 ? 2 : float3(1,2,3); }",
    };
    for (size_t i = 0; i < sizeof junk / sizeof junk[0]; i++) {
        p = NULL;
        nb_status st = nb_program_compile_source("t.nb", junk[i], NULL, &p);
        NB_EXPECT(st == NB_OK || st == NB_ERR_COMPILE);
        nb_program_free(p);
    }
}

int main(int argc, char **argv) {
    NB_TEST_MAIN(argc, argv, test_literals_and_casts, test_type_names, test_conversions, test_operators, test_scopes,
                 test_structs, test_overloads, test_function_rules, test_control_flow, test_intrinsics,
                 test_kernels_and_tensors, test_autodiff, test_imports, test_constants, test_reflection,
                 test_generics, test_malformed_programs);
}
