/* Parser: round trips (parse -> nb_ast_print) for every construct, locations, diagnostics with
 * file:line:col + source line + caret, several errors per run, and a fuzz test (random bytes,
 * random token soups, every prefix of a valid program, pathological nesting) that must terminate
 * without crashing. */
#include "lang/lexer.h"
#include "lang/parser.h"
#include "nb_test.h"

typedef struct parsed {
    nb_source_set src;
    nb_arena arena;
    nb_module_ast *m;
    nb_status st;
    nb_strbuf tree;
    nb_strbuf diags;
} parsed;

static void parse_text(parsed *r, const char *text, size_t len) {
    nb_source_set_init(&r->src);
    nb_arena_init(&r->arena, 0);
    nb_strbuf_init(&r->tree);
    nb_strbuf_init(&r->diags);
    int f = nb_source_add(&r->src, "t.nb", text, len);
    r->st = nb_parse_module(&r->src, f, &r->arena, &r->m);
    nb_ast_print(r->m, &r->tree);
    nb_diag_render(&r->src, &r->diags);
}

static void parsed_free(parsed *r) {
    nb_strbuf_free(&r->tree);
    nb_strbuf_free(&r->diags);
    nb_arena_destroy(&r->arena);
    nb_source_set_free(&r->src);
}

/* Parses without errors and prints exactly `expect` (one line per top-level declaration). */
static void expect_tree_(const char *text, const char *expect, int line) {
    parsed r;
    parse_text(&r, text, strlen(text));
    if (r.st != NB_OK) {
        fprintf(stderr, "  line %d: parse failed (%s):\n%s", line, nb_status_name(r.st), nb_strbuf_cstr(&r.diags));
        nb_test_failures_++;
    } else if (strcmp(nb_strbuf_cstr(&r.tree), expect) != 0) {
        fprintf(stderr, "  line %d: tree of\n%s\n  is\n%s  expected\n%s", line, text, nb_strbuf_cstr(&r.tree), expect);
        nb_test_failures_++;
    }
    parsed_free(&r);
}
#define expect_tree(text, expect) expect_tree_((text), (expect), __LINE__)

/* `stmts` inside `void t() { … }` must print as `{ expect }`. */
static void expect_body_(const char *stmts, const char *expect, int line) {
    char text[4096], tree[4096];
    snprintf(text, sizeof text, "void t() {\n%s\n}", stmts);
    snprintf(tree, sizeof tree, "(func void t () { %s })\n", expect);
    expect_tree_(text, tree, line);
}
#define expect_body(stmts, expect) expect_body_((stmts), (expect), __LINE__)

/* The expression statement `expr;` must print as `expect`. */
#define expect_expr(expr, expect) expect_body_(expr ";", (expect), __LINE__)

/* Parses with errors; the rendered diagnostics must be exactly `expect`. */
static void expect_diags_(const char *text, const char *expect, int line) {
    parsed r;
    parse_text(&r, text, strlen(text));
    if (r.st != NB_ERR_COMPILE) {
        fprintf(stderr, "  line %d: status %s, expected NB_ERR_COMPILE\n", line, nb_status_name(r.st));
        nb_test_failures_++;
    }
    if (strcmp(nb_strbuf_cstr(&r.diags), expect) != 0) {
        fprintf(stderr, "  line %d: diagnostics of\n%s\n  are\n%s  expected\n%s", line, text,
                nb_strbuf_cstr(&r.diags), expect);
        nb_test_failures_++;
    }
    parsed_free(&r);
}
#define expect_diags(text, expect) expect_diags_((text), (expect), __LINE__)

/* ---- round trips ----------------------------------------------------------------------------- */

static void test_imports_typedefs_globals(void) {
    expect_tree("import nn;\nimport util.math;\nimport \"lib/x.nb\";",
                "(import \"nn\")\n(import \"util.math\")\n(import \"lib/x.nb\")\n");
    expect_tree("typedef float3 vec;\ntypealias V2 = vector<float, 2>;\ntypedef float arr[4];",
                "(typedef vec float3)\n(typedef V2 vector<float,2>)\n(typedef arr float[4])\n");
    expect_tree("static const float kPi = 3.14;\nextern static const int N = 4;\nextern static const uint M;",
                "(var static const float kPi = 3.14)\n(var extern static const int N = 4)\n"
                "(var extern static const uint M)\n");
    expect_tree("static const int A = 1, B[2] = {1, 2};", "(var static const int A = 1)\n(var static const int[2] B = {1 2})\n");
    expect_tree(";;", "");
    expect_tree("", "");
}

static void test_functions(void) {
    expect_tree("[Differentiable] float f(float x, no_diff float y, out float z, inout float3 w, in float a = 1.0) "
                "{ return x; }",
                "(func [Differentiable] float f ((param float x) (param no_diff float y) (param out float z) "
                "(param inout float3 w) (param float a = 1.0)) { (return x) })\n");
    expect_tree("float g(float);\nfloat h(float, int[4] a);",
                "(func float g ((param float)))\n(func float h ((param float) (param int[4] a)))\n");
    expect_tree("[BackwardDerivative(g_bwd)][PreferRecompute] void g(inout DifferentialPair<float> x, float.Differential d) {}",
                "(func [BackwardDerivative(g_bwd)] [PreferRecompute] void g ((param inout DifferentialPair<float> x) "
                "(param float.Differential d)) {})\n");
    expect_body("S.Differential d = S.dzero(); a.b = c;", "(var S.Differential d = (call (. S dzero))) (= (. a b) c)");
}

static void test_functions_more(void) {
    expect_tree("[ForwardDerivative(S.fwd), Differentiable] public inline float[4] f(float a[3][2]) {}",
                "(func [ForwardDerivative((. S fwd))] [Differentiable] public inline float[4] f ((param float[3][2] a)) {})\n");
    expect_tree("[shader(\"compute\")][numthreads(8, 8, 1)] void k(uint3 tid) {}",
                "(func [shader(compute)] [numthreads(8, 8, 1)] void k ((param uint3 tid)) {})\n");
    expect_tree("void f(const float x, in out float y) {}",
                "(func void f ((param const float x) (param inout float y)) {})\n");
    parsed r;
    const char *text = "struct S { float a; [mutating] void inc() { a += 1; } float get() { return a; } }";
    parse_text(&r, text, strlen(text));
    NB_EXPECT(r.st == NB_OK && r.m->ndecls == 1);
    nb_decl *s = r.m->decls[0];
    NB_EXPECT(s->kind == NB_DECL_STRUCT && s->u.strct.nmethods == 2);
    NB_EXPECT(s->u.strct.methods[0]->u.func.is_mutating && !s->u.strct.methods[1]->u.func.is_mutating);
    NB_EXPECT(s->u.strct.methods[0]->u.func.parent == s && s->u.strct.methods[1]->u.func.parent == s);
    NB_EXPECT(s->module == r.m && strcmp(r.m->name, "t") == 0 && r.m->arena == &r.arena);
    parsed_free(&r);
}

static void test_structs(void) {
    expect_tree("struct S : IDifferentiable {\n"
                "  float w[4];\n  float3 b, c = float3(0);\n  static const int N = 3;\n"
                "  [mutating] void step(float lr) { w[0] -= lr; }\n"
                "  float get(int i) { return w[i] * S::N; }\n"
                "};",
                "(struct S : IDifferentiable (var float[4] w) (var float3 b) (var float3 c = (call float3 0)) "
                "(var static const int N = 3) (func [mutating] void step ((param float lr)) { (-= (index w 0) lr) }) "
                "(func float get ((param int i)) { (return (* (index w i) (:: S N))) }))\n");
    expect_tree("struct MLP<let W : int, let L : int = 2> : IDifferentiable, IFoo { float w[W * L]; }\n"
                "float f(MLP<16, 3> m) { MLP<16, 3> n = m; return 0; }",
                "(struct MLP <(param int W) (param int L = 2)> : IDifferentiable IFoo (var float[(* W L)] w))\n"
                "(func float f ((param MLP<16,3> m)) { (var MLP<16,3> n = m) (return 0) })\n");
    expect_tree("struct E {}", "(struct E)\n");
    /* use before declaration: Later is known from the pre-scan, so (Later)x is a cast */
    expect_tree("void f() { g((Later)x, (Alias)y, (vec3)z); }\nstruct Later { int a; }\ntypedef float Alias;\ntypealias vec3 = float3;",
                "(func void f () { (call g (cast Later x) (cast Alias y) (cast vec3 z)) })\n(struct Later (var int a))\n"
                "(typedef Alias float)\n(typedef vec3 float3)\n");
}

static void test_types(void) {
    expect_body("vector<float, 3> a; matrix<float, 2, 2> b; Tensor<float, 2> t; DiffTensor<float,1> d;",
                "(var vector<float,3> a) (var matrix<float,2,2> b) (var Tensor<float,2> t) (var DiffTensor<float,1> d)");
    expect_body("DifferentialPair<float3> p; MLP<16, 3> m; RWTensor<float, N> r; float3x4 x; half2 h; bool3 q;",
                "(var DifferentialPair<float3> p) (var MLP<16,3> m) (var RWTensor<float,N> r) (var float3x4 x) "
                "(var half2 h) (var bool3 q)");
    /* nested generics close with '>>' */
    expect_body("DifferentialPair<vector<float,3>> p; Array<Tensor<float, 2>, 4> a;",
                "(var DifferentialPair<vector<float,3>> p) (var Array<Tensor<float,2>,4> a)");
    /* arrays: declarator dims first, then the type's */
    expect_body("float a[4][3]; float[4] b; float[2] c[3]; int d[] = {1, 2};",
                "(var float[4][3] a) (var float[4] b) (var float[3][2] c) (var int[] d = {1 2})");
    expect_tree("float[4] f() {}\nvector<float,2>[3] g();",
                "(func float[4] f () {})\n(func vector<float,2>[3] g ())\n");
    /* generic value arguments are expressions (parenthesize comparisons) */
    expect_body("MLP<W * 2 + 1, (A > B)> m;", "(var MLP<(+ (* W 2) 1),(> A B)> m)");
}

static void test_local_decls(void) {
    expect_body("float a = 1, b[3] = {1, 2, 3};", "(decls (var float a = 1) (var float[3] b = {1 2 3}))");
    expect_body("let x = 1.0; var y = 2; let z : float3 = 0; var w : int;",
                "(var const _ x = 1.0) (var _ y = 2) (var const float3 z = 0) (var int w)");
    expect_body("const float c = 2; static const int K = 1;", "(var const float c = 2) (var static const int K = 1)");
    expect_body("S s; s.a = 1; T<int> u;", "(var S s) (= (. s a) 1) (var T<int> u)");
    /* a[i] = … and a < b are expressions, not declarations */
    expect_body("a[i] = 2; a < b; a[0] b;", "(= (index a i) 2) (< a b) (var a[0] b)");
    expect_body("float m[2][2] = {{1, 2}, {3, 4},};", "(var float[2][2] m = {{1 2} {3 4}})");
}

static void test_statements(void) {
    expect_body("if (a) b = 1; else if (c) { b = 2; } else b = 3;",
                "(if a (= b 1) else (if c { (= b 2) } else (= b 3)))");
    expect_body("if (a) if (b) x(); else y();", "(if a (if b (call x) else (call y)))");
    expect_body("for (int i = 0; i < 4; i++) s += i;", "(for (var int i = 0); (< i 4); (post++ i) (+= s i))");
    expect_body("for (i = 0, j = 1; ; i++, --j) {}", "(for (, (= i 0) (= j 1)); _; (, (post++ i) (-- j)) {})");
    expect_body("for (;;) ;", "(for _; _; _ (empty))");
    expect_body("while (x > 0) x -= 1;", "(while (> x 0) (-= x 1))");
    expect_body("do { y++; } while (y < 10);", "(do { (post++ y) } while (< y 10))");
    expect_body("switch (y) { case 1: case 2: y = 3; default: break; case 4: { y--; } case 5: }",
                "(switch y (case 1 2: (= y 3)) (case default: (break)) (case 4: { (post-- y) }) (case 5:))");
    expect_body("switch (k) { case A + 1: default: case 3: return; }", "(switch k (case (+ A 1) 3 default: (return)))");
    expect_body("break; continue; return; return x + 1; ; {}",
                "(break) (continue) (return) (return (+ x 1)) (empty) {}");
    expect_body("[MaxIters(8)] for (;;) {} [ForceUnroll] for (;;) {} [unroll] while (a) {} [loop] do {} while (a);",
                "[MaxIters(8)] (for _; _; _ {}) [ForceUnroll] (for _; _; _ {}) [unroll] (while a {}) [loop] (do {} while a)");
    expect_body("{ { x; } }", "{ { x } }");
}

static void test_expressions(void) {
    expect_expr("a = b = c", "(= a (= b c))");
    expect_expr("a += b -= c *= d", "(+= a (-= b (*= c d)))");
    expect_expr("x /= y -= 2", "(/= x (-= y 2))");
    expect_expr("a.b = c[0] = d", "(= (. a b) (= (index c 0) d))");
}

static void test_precedence(void) {
    expect_expr("a || b && c | d ^ e & f == g < h << i + j * k",
                "(|| a (&& b (| c (^ d (& e (== f (< g (<< h (+ i (* j k))))))))))");
    expect_expr("a * b + c << d < e == f & g ^ h | i && j || k",
                "(|| (&& (| (^ (& (== (< (<< (+ (* a b) c) d) e) f) g) h) i) j) k)");
    expect_expr("a - b - c", "(- (- a b) c)");
    expect_expr("a / b % c * d", "(* (% (/ a b) c) d)");
    expect_expr("a != b >= c > d <= e >> f", "(!= a (<= (> (>= b c) d) (>> e f)))");
    expect_expr("c ? a : b ? d : e", "(? c a (? b d e))");
    expect_expr("x = c ? a = 1 : b", "(= x (? c (= a 1) b))");
    expect_expr("-a * !b + ~c - +d", "(- (+ (* (- a) (! b)) (~ c)) (+ d))");
    expect_expr("++a + b++ - --c - d--", "(- (- (+ (++ a) (post++ b)) (-- c)) (post-- d))");
    expect_expr("-(a + b) * (c)", "(* (- (+ a b)) c)");
    expect_expr("a %= b &= c |= d ^= e <<= f >>= g", "(%= a (&= b (|= c (^= d (<<= e (>>= f g))))))");
}

static void test_postfix(void) {
    expect_expr("f(x, y).z[i].w()", "(call (. (index (. (call f x y) z) i) w))");
    expect_expr("t[i, j] + m[1][2]", "(+ (index t i j) (index (index m 1) 2))");
    expect_expr("S::kConst + S.kConst + this.a", "(+ (+ (:: S kConst) (. S kConst)) (. this a))");
    expect_expr("fwd_diff(f)(dpx)", "(call (call fwd_diff f) dpx)");
    expect_expr("bwd_diff(f)(dpx, dout)", "(call (call bwd_diff f) dpx dout)");
    expect_expr("diffPair(x, dx).d", "(. (call diffPair x dx) d)");
    expect_expr("detach(x) * no_diff f(x) + no_diff(y)", "(+ (* (call detach x) (no_diff (call f x))) (no_diff y))");
    expect_expr("float3(1, 2, 3).xy", "(. (call float3 1 2 3) xy)");
    expect_expr("vector<float, 3>(1, 2, 3) + matrix<float,2,2>(m)",
                "(+ (call (type vector<float,3>) 1 2 3) (call (type matrix<float,2,2>) m))");
    /* MLP is a generic struct of this file; Foo is unknown, so its '<' is less-than */
    /* generic functions: `sum<4>(x)` is an explicit instantiation, `sum < 4` elsewhere too */
    expect_tree("float sum<let N : int, let K : int = 2>(float x[N]) { return sum<N>(x); }",
                "(func float sum <(param int N) (param int K = 2)> ((param float[N] x)) "
                "{ (return (call (type sum<N>) x)) })\n");
    expect_tree("struct MLP<let N : int> {}\nvoid t() { x = MLP<4>(w) + Foo<4>(w); }",
                "(struct MLP <(param int N)>)\n(func void t () { (= x (> (< (+ (call (type MLP<4>) w) Foo) 4) w)) })\n");
}

static void test_casts_and_literals(void) {
    expect_expr("(float)x + (int3)(y) * (uint)-z", "(+ (cast float x) (* (cast int3 y) (cast uint (- z))))");
    expect_expr("(vector<float,3>)v", "(cast vector<float,3> v)");
    expect_expr("(vector<float,3>(1, 2, 3) + v) * 2", "(* (+ (call (type vector<float,3>) 1 2 3) v) 2)");
    expect_expr("(float3(1, 2, 3))", "(call float3 1 2 3)");
    expect_expr("1 + 1u + 0x1F + 0xFFu + 010", "(+ (+ (+ (+ 1 1u) 31) 255u) 8)");
    expect_expr("1.0 + 2.5f + 0.5h + 1e-3l + .25 + 3.", "(+ (+ (+ (+ (+ 1.0 2.5) 0.5h) 0.001l) 0.25) 3.0)");
    expect_expr("true && !false", "(&& true (! false))");
    expect_expr("a = {1, 2, {3}}", "(= a {1 2 {3}})");
    expect_expr("a = {}", "(= a {})");
}

/* ---- locations ------------------------------------------------------------------------------- */

static void test_locations(void) {
    parsed r;
    const char *text = "float f(float x) {\n"      /* 1 */
                       "    return a.b + g(x)[1] * -y;\n" /* 2 */
                       "}\n";
    parse_text(&r, text, strlen(text));
    NB_EXPECT(r.st == NB_OK && r.m->ndecls == 1);
    nb_decl *f = r.m->decls[0];
    NB_EXPECT(f->loc.line == 1 && f->loc.col == 7); /* the name */
    NB_EXPECT(f->u.func.params[0]->loc.col == 15);
    NB_EXPECT(f->u.func.ret->loc.col == 1);
    nb_stmt *ret = f->u.func.body->u.block.items[0];
    NB_EXPECT(ret->kind == NB_ST_RETURN && ret->loc.line == 2 && ret->loc.col == 5);
    nb_expr *plus = ret->u.ret.value;
    NB_EXPECT(plus->kind == NB_EX_BINARY && plus->loc.col == 16); /* the '+' */
    nb_expr *mem = plus->u.binary.lhs;
    NB_EXPECT(mem->kind == NB_EX_MEMBER && mem->loc.col == 14 && mem->u.member.base->loc.col == 12);
    nb_expr *mul = plus->u.binary.rhs;
    NB_EXPECT(mul->kind == NB_EX_BINARY && mul->loc.col == 26);
    nb_expr *idx = mul->u.binary.lhs;
    NB_EXPECT(idx->kind == NB_EX_INDEX && idx->loc.col == 22);
    NB_EXPECT(idx->u.index.base->kind == NB_EX_CALL && idx->u.index.base->loc.col == 18);
    nb_expr *neg = mul->u.binary.rhs;
    NB_EXPECT(neg->kind == NB_EX_UNARY && neg->loc.col == 28 && neg->u.unary.operand->loc.col == 29);
    parsed_free(&r);

    text = "void g() { a = b ? c : d; x++; }";
    parse_text(&r, text, strlen(text));
    nb_stmt *s0 = r.m->decls[0]->u.func.body->u.block.items[0];
    NB_EXPECT(s0->u.expr.expr->kind == NB_EX_ASSIGN && s0->u.expr.expr->loc.col == 14);
    NB_EXPECT(s0->u.expr.expr->u.assign.rhs->kind == NB_EX_TERNARY && s0->u.expr.expr->u.assign.rhs->loc.col == 18);
    nb_stmt *s1 = r.m->decls[0]->u.func.body->u.block.items[1];
    NB_EXPECT(s1->u.expr.expr->kind == NB_EX_UNARY && s1->u.expr.expr->u.unary.postfix &&
              s1->u.expr.expr->loc.col == 28);
    parsed_free(&r);
}

static void test_literal_values(void) {
    parsed r;
    const char *text = "void g() { x = 1.5h; y = 2.0l; z = 3.0f; w = 18446744073709551615; }";
    parse_text(&r, text, strlen(text));
    nb_stmt **items = r.m->decls[0]->u.func.body->u.block.items;
    NB_EXPECT(items[0]->u.expr.expr->u.assign.rhs->u.flit.kind == NB_SC_HALF);
    NB_EXPECT(items[1]->u.expr.expr->u.assign.rhs->u.flit.kind == NB_SC_DOUBLE);
    NB_EXPECT(items[2]->u.expr.expr->u.assign.rhs->u.flit.kind == NB_SC_FLOAT);
    NB_EXPECT(items[2]->u.expr.expr->u.assign.rhs->u.flit.value == 3.0);
    NB_EXPECT(items[3]->u.expr.expr->u.assign.rhs->u.ilit.value == UINT64_MAX);
    parsed_free(&r);
}

/* ---- diagnostics --------------------------------------------------------------------------- */

static void test_error_messages(void) {
    expect_diags("float f(float x) {\n    float y = x * 2\n    return y;\n}\n",
                 "t.nb:2:20: error: expected ';' after declaration\n    float y = x * 2\n                   ^\n");
    expect_diags("void f() {\n  g(1, 2;\n}\n",
                 "t.nb:2:9: error: expected ')' to close '(' opened at 2:4, found ';'\n  g(1, 2;\n        ^\n");
    expect_diags("void f() {}\n}\n", "t.nb:2:1: error: unexpected '}'\n}\n^\n");
    expect_diags("void f() {\n  x = 3 +;\n}", "t.nb:2:10: error: expected an expression, found ';'\n  x = 3 +;\n         ^\n");
    expect_diags("void f() {\n  x = 1;\n", "t.nb:3:1: error: expected '}' to close '{' opened at 1:10, found end of file\n\n^\n");
    expect_diags("void f() { if x > 0 { } }",
                 "t.nb:1:15: error: expected '(' after 'if', found 'x'\nvoid f() { if x > 0 { } }\n              ^\n");
    expect_diags("void f() { x = a ? b; }",
                 "t.nb:1:21: error: expected ':' to match '?' at 1:18, found ';'\nvoid f() { x = a ? b; }\n                    ^\n");
    expect_diags("void f() { a.(b); }",
                 "t.nb:1:14: error: expected a member name after '.', found '('\nvoid f() { a.(b); }\n             ^\n");
    expect_diags("void f() { x = (x));\n}",
                 "t.nb:1:19: error: unexpected ')' (no matching '(')\nvoid f() { x = (x));\n                  ^\n");
    /* (x)y: x is not a type name, so this is not a cast */
    expect_diags("void f() { z = (x)y; }",
                 "t.nb:1:19: error: expected ';' after expression\nvoid f() { z = (x)y; }\n                  ^\n");
    expect_diags("float f(float x { }",
                 "t.nb:1:17: error: expected ',' or ')' in parameter list opened at 1:8, found '{'\nfloat f(float x { }\n                ^\n");
    expect_diags("struct S { float a }",
                 "t.nb:1:19: error: expected ';' after declaration\nstruct S { float a }\n                  ^\n");
    expect_diags("struct S<1> {}",
                 "t.nb:1:10: error: expected a generic parameter ('T : IFoo' or 'let N : int')\n"
                 "struct S<1> {}\n         ^\n");
    expect_diags("float f<let N : int> g;",
                 "t.nb:1:22: error: expected '(' after the generic parameters of 'f', found 'g'\n"
                 "float f<let N : int> g;\n                     ^\n");
    expect_diags("x = 1;", "t.nb:1:3: error: expected a name after type 'x', found '='\nx = 1;\n  ^\n");
    expect_diags("f(1);", "t.nb:1:1: error: expected a return type before function name 'f'\nf(1);\n^\n");
    expect_diags("union N { float f; }",
                 "t.nb:1:1: error: 'union' declarations are not supported\nunion N { float f; }\n^\n");
    expect_diags("namespace N;", "t.nb:1:12: error: expected '{' after 'namespace N', found ';'\nnamespace N;\n           ^\n");
    expect_diags("void f() { case 1: ; }",
                 "t.nb:1:12: error: 'case' label outside of a 'switch'\nvoid f() { case 1: ; }\n           ^\n");
    expect_diags("void f() { else x; }", "t.nb:1:12: error: 'else' without a matching 'if'\nvoid f() { else x; }\n           ^\n");
    expect_diags("void f() { switch (x) { y = 1; case 1: } }",
                 "t.nb:1:25: error: statement in 'switch' before the first 'case' label\nvoid f() { switch (x) { y = 1; case 1: } }\n                        ^\n");
    expect_diags("void f() { do x++; until (x); }",
                 "t.nb:1:20: error: expected 'while' after the body of 'do' (at 1:12), found 'until'\n"
                 "void f() { do x++; until (x); }\n                   ^\n");
    expect_diags("void f() { struct S {} }",
                 "t.nb:1:12: error: 'struct' declarations are only allowed at the top level of a file\n"
                 "void f() { struct S {} }\n           ^\n");
    expect_diags("import ;", "t.nb:1:8: error: expected a module name after 'import', found ';'\nimport ;\n       ^\n");
    /* (string literals parse as expressions: printf's format; the checker rejects other uses,
     * tests/lang/diag_target.nb) */
    /* a lexical error is reported once, not again by the parser */
    expect_diags("void f() { x = 1 @ 2; }",
                 "t.nb:1:18: error: invalid character '@'\nvoid f() { x = 1 @ 2; }\n                 ^\n");
    expect_diags("void f() { x = 0x + 1; }",
                 "t.nb:1:16: error: expected hexadecimal digits after '0x'\nvoid f() { x = 0x + 1; }\n               ^\n");
    /* tabs are kept in the caret line so it lines up */
    expect_diags("void f() {\n\tx = ;\n}", "t.nb:2:6: error: expected an expression, found ';'\n\tx = ;\n\t    ^\n");
}

static void test_multiple_errors(void) {
    const char *text = "import nn\n"                /* 1: missing ';' (assumed at end of line) */
                       "float f(float x) {\n"
                       "    float y = x * 2\n"      /* 3: missing ';' */
                       "    y = (y + 1;\n"          /* 4: unclosed '(' */
                       "    return y;\n"
                       "}\n"
                       "}\n"                        /* 7: stray '}' */
                       "float g(float x) { return x @ 2; }\n" /* 8: invalid char */
                       "float h() { return 1 }\n";  /* 9: missing ';' before '}' */
    parsed r;
    parse_text(&r, text, strlen(text));
    NB_EXPECT(r.st == NB_ERR_COMPILE);
    NB_EXPECT(r.src.nerrors == 6);
    const char *d = nb_strbuf_cstr(&r.diags);
    static const char *const want[] = {
        "t.nb:1:10: error: expected ';' after import\n",
        "t.nb:3:20: error: expected ';' after declaration\n",
        "t.nb:4:15: error: expected ')' to close '(' opened at 4:9, found ';'\n",
        "t.nb:7:1: error: unexpected '}'\n",
        "t.nb:8:29: error: invalid character '@'\n",
        "t.nb:9:21: error: expected ';' after return value\n",
    };
    const char *at = d;
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const char *hit = strstr(at, want[i]);
        if (!hit) fprintf(stderr, "  missing (in order): %s  in:\n%s", want[i], d);
        NB_EXPECT(hit != NULL);
        if (hit) at = hit;
    }
    /* the tree is still built: all three functions are there */
    NB_EXPECT(r.m && r.m->ndecls == 4);
    NB_EXPECT(strstr(nb_strbuf_cstr(&r.tree), "(func float h () { (return 1) })"));
    /* nb_diag_status puts the rendering into nb_last_error() */
    NB_EXPECT_ERR(nb_diag_status(&r.src), NB_ERR_COMPILE, "t.nb:4:15: error: expected ')' to close '(' opened at 4:9");
    NB_EXPECT(strstr(nb_last_error(), "    y = (y + 1;\n              ^\n"));
    parsed_free(&r);
}

static void test_error_cap(void) {
    nb_strbuf sb;
    nb_strbuf_init(&sb);
    for (int i = 0; i < 200; i++) nb_strbuf_printf(&sb, "void f%d() { x = ; }\n", i);
    parsed r;
    nb_source_set_init(&r.src);
    r.src.max_errors = 10;
    nb_arena_init(&r.arena, 0);
    int f = nb_source_add(&r.src, "t.nb", nb_strbuf_cstr(&sb), sb.len);
    r.st = nb_parse_module(&r.src, f, &r.arena, &r.m);
    NB_EXPECT(r.st == NB_ERR_COMPILE && r.src.nerrors == 10 && r.src.ndiags == 10);
    nb_arena_destroy(&r.arena);
    nb_source_set_free(&r.src);
    nb_strbuf_free(&sb);
}

/* ---- robustness ---------------------------------------------------------------------------- */

static const char *const valid_program =
    "import nn;\n"
    "import \"dir/x.nb\";\n"
    "struct S : IDifferentiable { float w[4]; float3 b; static const int N = 3;\n"
    "  [mutating] void step(float lr) { w[0] -= lr * b.x; } };\n"
    "struct MLP<let W : int, let L : int> { float weights[W][L]; };\n"
    "[Differentiable] float f(float x, no_diff float y, out float z, inout float3 w, in float a = 1.0)\n"
    "{ z = x * y + a; return x; }\n"
    "float g(float);\n"
    "static const float kPi = 3.14;\n"
    "extern static const int N = 4;\n"
    "typedef float3 vec;\n"
    "typealias vec2 = vector<float, 2>;\n"
    "float[4] h(Tensor<float, 2> t, DifferentialPair<float3> dp, MLP<16, 3> m, matrix<float,2,2> mm) {\n"
    "  float a = 1, b[3] = {1,2,3};\n"
    "  let x = 1.0; var y = 2;\n"
    "  vector<float,3> v = vector<float,3>(1,2,3);\n"
    "  DifferentialPair<vector<float,3>> q;\n"
    "  if (a < b[0]) a = 2; else { a = 3; }\n"
    "  for (int i = 0; i < 4; i++) { if (i == 2) continue; break; }\n"
    "  [MaxIters(8)] while (x > 0) x -= 1;\n"
    "  do { y++; } while (y < 10);\n"
    "  switch (y) { case 1: case 2: y = 3; default: break; case 4: { y--; } }\n"
    "  [ForceUnroll] for (;;) ;\n"
    "  float c = (float)y + float3(1,2,3).x * S::N + S.N; // comment\n"
    "  float d = t[1, 2] + fwd_diff(f)(dp).d + bwd_diff(f)(dp, 1.0e-3f);\n"
    "  float e = no_diff f(x, y, z, w) ? detach(x) : -x; /* block */\n"
    "  a = b[1] = c <<= 2u;\n"
    "  return {1, 2, 3, 0x4};\n"
    "}\n";

/* Every diagnostic location must lie inside the file (so carets render). */
static int diags_in_bounds(const nb_source_set *src) {
    for (int i = 0; i < src->ndiags; i++) {
        nb_loc l = src->diags[i].loc;
        if (l.file != 0 || l.line < 1 || l.line > src->files[0].nlines || l.col < 1) return 0;
        size_t n;
        nb_source_line(src, 0, l.line, &n);
        if ((size_t)l.col > n + 1) return 0;
    }
    return 1;
}

/* Parses (and prints, and renders) arbitrary bytes; returns 0 if an invariant broke. */
static int parse_any(const char *text, size_t len) {
    parsed r;
    parse_text(&r, text, len);
    int ok = r.m != NULL && (r.st == NB_OK || r.st == NB_ERR_COMPILE);
    ok = ok && ((r.st == NB_OK) == (r.src.nerrors == 0));
    ok = ok && diags_in_bounds(&r.src);
    if (r.st == NB_ERR_COMPILE) ok = ok && nb_diag_status(&r.src) == NB_ERR_COMPILE && nb_last_error()[0];
    if (!ok) fprintf(stderr, "  invariant broken for input (%zu bytes): %.*s\n", len, (int)(len > 200 ? 200 : len), text);
    parsed_free(&r);
    return ok;
}

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint32_t rnd(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 11);
}

static void test_valid_program_parses(void) {
    parsed r;
    parse_text(&r, valid_program, strlen(valid_program));
    if (r.st != NB_OK) fprintf(stderr, "%s", nb_strbuf_cstr(&r.diags));
    NB_EXPECT(r.st == NB_OK && r.m->ndecls == 11);
    parsed_free(&r);
}

static void test_fuzz_prefixes(void) {
    size_t n = strlen(valid_program);
    int bad = 0;
    for (size_t len = 0; len <= n && bad < 3; len++) bad += !parse_any(valid_program, len);
    /* and every suffix, and the program with one byte deleted at a stride */
    for (size_t off = 0; off <= n && bad < 3; off += 3) bad += !parse_any(valid_program + off, n - off);
    char *buf = malloc(n + 1);
    for (size_t del = 0; del < n && bad < 3; del += 5) {
        memcpy(buf, valid_program, del);
        memcpy(buf + del, valid_program + del + 1, n - del - 1);
        bad += !parse_any(buf, n - 1);
    }
    free(buf);
    NB_EXPECT(bad == 0);
}

static void test_fuzz_random_bytes(void) {
    char buf[256];
    int bad = 0;
    for (int iter = 0; iter < 3000 && bad < 3; iter++) {
        size_t len = rnd() % sizeof buf;
        int printable = iter % 2;
        for (size_t i = 0; i < len; i++)
            buf[i] = printable ? (char)(32 + rnd() % 95) : (char)(rnd() & 0xFF);
        bad += !parse_any(buf, len);
    }
    NB_EXPECT(bad == 0);
}

static void test_fuzz_token_soup(void) {
    static const char *const vocab[] = {
        "(", ")", "{", "}", "[", "]", ";", ",", ".", ":", "::", "?", "+", "-", "*", "/", "%", "&", "|",
        "^", "~", "!", "&&", "||", "<<", ">>", "<", ">", "<=", ">=", "==", "!=", "=", "+=", "<<=", "++",
        "--", "->", "struct", "return", "if", "else", "for", "while", "do", "break", "continue", "switch",
        "case", "default", "true", "false", "in", "out", "inout", "static", "const", "extern", "import",
        "no_diff", "typedef", "typealias", "let", "var", "public", "inline", "this", "x", "y", "f", "S",
        "float", "float3", "int", "vector", "matrix", "Tensor", "DifferentialPair", "MLP", "1", "2.5f",
        "0x1F", "\"s\"", "[Differentiable]", "[MaxIters(4)]", "@", "#x\n", "/*", "*/", "//\n", "\n",
        "1e", "fwd_diff", "(float)", "<let W : int>", "float f(float x) {", "}", "vector<float,3>",
        "DifferentialPair<vector<float,3>>", "struct MLP<let W:int> {", "case 1:", "for (;;)",
    };
    int nv = (int)(sizeof vocab / sizeof vocab[0]);
    nb_strbuf sb;
    nb_strbuf_init(&sb);
    int bad = 0;
    for (int iter = 0; iter < 3000 && bad < 3; iter++) {
        nb_strbuf_clear(&sb);
        int ntok = (int)(rnd() % 80);
        for (int i = 0; i < ntok; i++) {
            nb_strbuf_append(&sb, vocab[rnd() % (uint32_t)nv]);
            nb_strbuf_append_char(&sb, ' ');
        }
        bad += !parse_any(nb_strbuf_cstr(&sb), sb.len);
    }
    nb_strbuf_free(&sb);
    NB_EXPECT(bad == 0);
}

/* Deep nesting and long chains: diagnosed (or parsed) without exhausting the stack. */
static void test_fuzz_pathological(void) {
    static const struct {
        const char *prefix, *unit, *suffix;
        int expect_ok; /* 1: must parse; 0: must fail cleanly; -1: either */
    } cases[] = {
        {"void f() { x = ", "(", "; }", 0},
        {"void f() { x = ", "-", "y; }", 0},
        {"void f() ", "{", "", 0},
        {"void f() { ", "if (x) ", "; }", 0},
        {"void f() { x = a", " + a", "; }", 0},
        {"void f() { x = a", ".b", "; }", 0},
        {"void f() { x = a", "[0]", "; }", 0},
        {"void f() { x = a", "()", "; }", 0},
        {"void f() { x = ", "a ? b : ", "c; }", 0},
        {"void f() { x = ", "a = ", "c; }", 0},
        {"void f() { x = ", "{", "; }", 0},
        {"", "vector<", "", 0},
        {"void f() { ", "vector<", " x; }", 0},
        {"", "[A]", " void f() {}", 1},
        {"", "}", "", 0},
        {"", "<<<<", "", 0},
        {"void f() { for (;;x", ", x", ") {} }", 0},
        {"void f() { ", "x; ", "}", 1},
        {"void f() { switch (x) { ", "case 1: ", "} }", 1},
        {"", "typedef ", "", 0},
        {"void f() { a", "[a", "] = 1; }", 0},
        {"void f() { ", "Foo<", " x; }", 0},
        {"", "struct a ", "", 0},
    };
    nb_strbuf sb;
    nb_strbuf_init(&sb);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        nb_strbuf_clear(&sb);
        nb_strbuf_append(&sb, cases[c].prefix);
        for (int i = 0; i < 20000; i++) nb_strbuf_append(&sb, cases[c].unit);
        nb_strbuf_append(&sb, cases[c].suffix);
        parsed r;
        parse_text(&r, nb_strbuf_cstr(&sb), sb.len);
        int ok = r.m != NULL && diags_in_bounds(&r.src);
        if (cases[c].expect_ok == 1) ok = ok && r.st == NB_OK;
        if (cases[c].expect_ok == 0) ok = ok && r.st == NB_ERR_COMPILE;
        if (!ok) fprintf(stderr, "  case %zu (%s%s…): %s\n%.300s", c, cases[c].prefix, cases[c].unit,
                         nb_status_name(r.st), nb_strbuf_cstr(&r.diags));
        NB_EXPECT(ok);
        parsed_free(&r);
    }
    /* a moderately nested expression is fine */
    nb_strbuf_clear(&sb);
    nb_strbuf_append(&sb, "void f() { x = ");
    for (int i = 0; i < 100; i++) nb_strbuf_append(&sb, "(");
    nb_strbuf_append(&sb, "1");
    for (int i = 0; i < 100; i++) nb_strbuf_append(&sb, ")");
    nb_strbuf_append(&sb, "; }");
    parsed r;
    parse_text(&r, nb_strbuf_cstr(&sb), sb.len);
    NB_EXPECT(r.st == NB_OK);
    parsed_free(&r);
    nb_strbuf_free(&sb);
}

static void test_api_errors(void) {
    nb_source_set src;
    nb_source_set_init(&src);
    nb_arena arena;
    nb_arena_init(&arena, 0);
    nb_module_ast *m = (nb_module_ast *)1;
    NB_EXPECT_ERR(nb_parse_module(&src, 0, &arena, &m), NB_ERR_INVALID_ARG, "no source file 0");
    NB_EXPECT(m == NULL);
    NB_EXPECT(nb_parse_module(NULL, 0, &arena, &m) == NB_ERR_INVALID_ARG);
    nb_arena_destroy(&arena);
    nb_source_set_free(&src);
}

int main(int argc, char **argv) {
    NB_TEST_MAIN(argc, argv, test_imports_typedefs_globals, test_functions, test_functions_more, test_structs,
                 test_types, test_local_decls, test_statements, test_expressions, test_precedence,
                 test_postfix, test_casts_and_literals, test_locations,
                 test_literal_values, test_error_messages, test_multiple_errors, test_error_cap,
                 test_valid_program_parses, test_fuzz_prefixes, test_fuzz_random_bytes, test_fuzz_token_soup,
                 test_fuzz_pathological, test_api_errors);
}
