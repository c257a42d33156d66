/* IR: builder, printer (golden text), verifier, constant folding, DCE, lowering. */
#include <string.h>

#include "lang/compiler.h"
#include "lang/ir.h"
#include "lang/program.h"
#include "nb_test.h"

typedef struct fixture {
    nb_arena arena;
    nb_type_table tt;
    nb_ir_module m;
    nb_ir_builder b;
} fixture;

static void fx_init(fixture *fx)
{
    nb_arena_init(&fx->arena, 0);
    nb_types_init(&fx->tt, &fx->arena);
    nb_ir_module_init(&fx->m, &fx->tt);
    memset(&fx->b, 0, sizeof fx->b);
    fx->b.m = &fx->m;
}

static void fx_free(fixture *fx)
{
    nb_ir_module_free(&fx->m);
    nb_types_free(&fx->tt);
    nb_arena_destroy(&fx->arena);
}

static nb_ir_func *fx_func(fixture *fx, const char *name, const nb_type *ret)
{
    nb_ir_func *f = nb_ir_func_new(&fx->m, name, ret);
    fx->b.f = f;
    fx->b.block = f->body;
    return f;
}

static int verify(nb_ir_func *f, const char *expect_substr)
{
    nb_strbuf errs;
    nb_strbuf_init(&errs);
    int n = nb_ir_verify_func(f, &errs);
    int ok = expect_substr ? (n > 0 && strstr(nb_strbuf_cstr(&errs), expect_substr) != NULL) : n == 0;
    if (!ok) fprintf(stderr, "  verifier (%d): %s\n", n, nb_strbuf_cstr(&errs));
    nb_strbuf_free(&errs);
    return ok;
}

static void test_build_print(void)
{
    fixture fx;
    fx_init(&fx);
    const nb_type *F = fx.tt.t_float;
    nb_ir_func *f = fx_func(&fx, "add", F);
    nb_ir_var *a = nb_ir_param_new(f, "a", F, NB_DIR_IN);
    nb_ir_var *b = nb_ir_param_new(f, "b", F, NB_DIR_IN);
    nb_ir_inst *x = nb_ir_load(&fx.b, a, NULL, 0, NULL);
    nb_ir_inst *y = nb_ir_load(&fx.b, b, NULL, 0, NULL);
    nb_ir_inst *s = nb_ir_binary(&fx.b, NB_IR_ADD, x, y);
    nb_ir_jump(&fx.b, NB_IR_RETURN, s);
    NB_EXPECT(verify(f, NULL));
    nb_strbuf o;
    nb_strbuf_init(&o);
    nb_ir_print_func(f, &o);
    const char *golden =
        "func add(in $a: float, in $b: float) -> float {\n"
        "  %0 = load $a : float\n"
        "  %1 = load $b : float\n"
        "  %2 = add %0, %1 : float\n"
        "  return %2\n"
        "}\n";
    NB_EXPECT(strcmp(nb_strbuf_cstr(&o), golden) == 0);
    if (strcmp(nb_strbuf_cstr(&o), golden)) fprintf(stderr, "%s", nb_strbuf_cstr(&o));
    nb_strbuf_free(&o);
    fx_free(&fx);
}

static void test_structured_print(void)
{
    fixture fx;
    fx_init(&fx);
    const nb_type *I = fx.tt.t_int;
    const nb_type *V = nb_type_vector(&fx.tt, NB_SC_FLOAT, 3);
    nb_ir_func *f = fx_func(&fx, "loopy", I);
    nb_ir_var *n = nb_ir_param_new(f, "n", I, NB_DIR_IN);
    nb_ir_var *v = nb_ir_param_new(f, "v", V, NB_DIR_INOUT);
    nb_ir_var *i = nb_ir_var_new(f, "i", I);
    nb_ir_store(&fx.b, i, NULL, 0, NULL, nb_ir_const_i(&fx.b, I, 0));
    nb_ir_inst *loop = nb_ir_loop(&fx.b);
    loop->max_iters = 8;
    nb_ir_block *save = fx.b.block;
    fx.b.block = loop->blocks[0];
    nb_ir_inst *li = nb_ir_load(&fx.b, i, NULL, 0, NULL);
    nb_ir_inst *ln = nb_ir_load(&fx.b, n, NULL, 0, NULL);
    loop->ops[0] = nb_ir_binary(&fx.b, NB_IR_LT, li, ln);
    fx.b.block = loop->blocks[1];
    nb_ir_inst *iv = nb_ir_load(&fx.b, i, NULL, 0, NULL);
    nb_ir_step st = {NB_IR_STEP_INDEX, 0, {0}, 0, NULL};
    nb_ir_inst *fl = nb_ir_convert(&fx.b, iv, fx.tt.t_float);
    nb_ir_store(&fx.b, v, &st, 1, &iv, fl);
    nb_ir_inst *iff = nb_ir_if(&fx.b, nb_ir_binary(&fx.b, NB_IR_EQ, iv, nb_ir_const_i(&fx.b, I, 2)));
    fx.b.block = iff->blocks[0];
    nb_ir_jump(&fx.b, NB_IR_BREAK, NULL);
    fx.b.block = loop->blocks[2];
    nb_ir_inst *li2 = nb_ir_load(&fx.b, i, NULL, 0, NULL);
    nb_ir_inst *one = nb_ir_const_i(&fx.b, I, 1);
    nb_ir_store(&fx.b, i, NULL, 0, NULL, nb_ir_binary(&fx.b, NB_IR_ADD, li2, one));
    fx.b.block = save;
    nb_ir_jump(&fx.b, NB_IR_RETURN, nb_ir_load(&fx.b, i, NULL, 0, NULL));
    NB_EXPECT(verify(f, NULL));
    nb_strbuf o;
    nb_strbuf_init(&o);
    nb_ir_print_func(f, &o);
    const char *golden =
        "func loopy(in $n: int, inout $v: float3) -> int {\n"
        "  var $i: int\n"
        "  %0 = const 0 : int\n"
        "  store $i, %0\n"
        "  loop max_iters=8 {\n"
        "  cond:\n"
        "    %3 = load $i : int\n"
        "    %4 = load $n : int\n"
        "    %5 = lt %3, %4 : bool\n"
        "    -> %5\n"
        "  body:\n"
        "    %6 = load $i : int\n"
        "    %7 = convert %6 : float\n"
        "    store $v[%6], %7\n"
        "    %9 = const 2 : int\n"
        "    %10 = eq %6, %9 : bool\n"
        "    if %10 {\n"
        "      break\n"
        "    }\n"
        "  step:\n"
        "    %13 = load $i : int\n"
        "    %14 = const 1 : int\n"
        "    %15 = add %13, %14 : int\n"
        "    store $i, %15\n"
        "  }\n"
        "  %17 = load $i : int\n"
        "  return %17\n"
        "}\n";
    NB_EXPECT(strcmp(nb_strbuf_cstr(&o), golden) == 0);
    if (strcmp(nb_strbuf_cstr(&o), golden)) fprintf(stderr, "%s", nb_strbuf_cstr(&o));
    nb_strbuf_free(&o);
    fx_free(&fx);
}

static void test_verifier_catches(void)
{
    fixture fx;
    fx_init(&fx);
    const nb_type *F = fx.tt.t_float, *I = fx.tt.t_int;
    /* type mismatch in add */
    nb_ir_func *f = fx_func(&fx, "bad1", F);
    nb_ir_inst *a = nb_ir_const_f(&fx.b, F, 1);
    nb_ir_inst *b = nb_ir_const_i(&fx.b, I, 2);
    nb_ir_inst *s = nb_ir_new(&fx.b, NB_IR_ADD, F, 2);
    s->ops[0] = a;
    s->ops[1] = b;
    nb_ir_jump(&fx.b, NB_IR_RETURN, s);
    NB_EXPECT(verify(f, "operand types"));

    /* value used outside the region that defines it */
    f = fx_func(&fx, "bad2", F);
    nb_ir_inst *c = nb_ir_const_i(&fx.b, fx.tt.t_bool, 1);
    nb_ir_inst *iff = nb_ir_if(&fx.b, c);
    fx.b.block = iff->blocks[0];
    nb_ir_inst *inner = nb_ir_const_f(&fx.b, F, 3);
    fx.b.block = f->body;
    nb_ir_jump(&fx.b, NB_IR_RETURN, inner);
    NB_EXPECT(verify(f, "dominate"));

    /* break outside a loop, code after a terminator, wrong return type */
    f = fx_func(&fx, "bad3", F);
    nb_ir_jump(&fx.b, NB_IR_BREAK, NULL);
    nb_ir_jump(&fx.b, NB_IR_RETURN, nb_ir_const_i(&fx.b, I, 0));
    NB_EXPECT(verify(f, "break outside"));
    NB_EXPECT(verify(f, "unreachable"));
    NB_EXPECT(verify(f, "return value"));

    /* if on a non-bool, call with wrong argument type */
    nb_ir_func *callee = fx_func(&fx, "callee", F);
    nb_ir_param_new(callee, "x", F, NB_DIR_IN);
    nb_ir_jump(&fx.b, NB_IR_RETURN, nb_ir_const_f(&fx.b, F, 0));
    f = fx_func(&fx, "bad4", F);
    nb_ir_inst *ci = nb_ir_const_i(&fx.b, I, 1);
    nb_ir_if(&fx.b, ci);
    nb_ir_inst *args[1] = {ci};
    nb_ir_inst *call = nb_ir_call(&fx.b, callee, args, NULL);
    nb_ir_jump(&fx.b, NB_IR_RETURN, call);
    NB_EXPECT(verify(f, "if condition"));
    NB_EXPECT(verify(f, "argument type"));
    fx_free(&fx);
}

static void test_fold_dce(void)
{
    fixture fx;
    fx_init(&fx);
    const nb_type *F = fx.tt.t_float, *I = fx.tt.t_int;
    const nb_type *V = nb_type_vector(&fx.tt, NB_SC_FLOAT, 2);
    nb_ir_func *f = fx_func(&fx, "k", F);
    nb_ir_var *x = nb_ir_param_new(f, "x", F, NB_DIR_IN);
    nb_ir_var *dead = nb_ir_var_new(f, "dead", F);
    /* (2 + 3) * 4 -> 20; int wraps to 32 bits; vector arithmetic; comparisons */
    nb_ir_inst *t = nb_ir_binary(&fx.b, NB_IR_MUL, nb_ir_binary(&fx.b, NB_IR_ADD, nb_ir_const_i(&fx.b, I, 2), nb_ir_const_i(&fx.b, I, 3)),
                                 nb_ir_const_i(&fx.b, I, 4));
    nb_ir_inst *w = nb_ir_binary(&fx.b, NB_IR_ADD, nb_ir_const_i(&fx.b, I, 2147483647), nb_ir_const_i(&fx.b, I, 1));
    nb_ir_inst *comps[2] = {nb_ir_const_f(&fx.b, F, 1.5), nb_ir_const_f(&fx.b, F, -2)};
    nb_ir_inst *vec = nb_ir_construct(&fx.b, V, comps, 2);
    nb_ir_inst *vv = nb_ir_binary(&fx.b, NB_IR_MUL, vec, nb_ir_convert(&fx.b, nb_ir_const_f(&fx.b, F, 2), V));
    nb_ir_inst *vy = nb_ir_extract(&fx.b, vv, 1);
    nb_ir_inst *cmp = nb_ir_binary(&fx.b, NB_IR_LT, nb_ir_convert(&fx.b, t, F), vy);           /* 20 < -4: false */
    nb_ir_inst *sel = nb_ir_select(&fx.b, cmp, nb_ir_load(&fx.b, x, NULL, 0, NULL), vy);       /* -> vy = -4 */
    nb_ir_inst *div0 = nb_ir_binary(&fx.b, NB_IR_DIV, nb_ir_const_i(&fx.b, I, 1), nb_ir_const_i(&fx.b, I, 0)); /* not folded */
    nb_ir_store(&fx.b, dead, NULL, 0, NULL, nb_ir_convert(&fx.b, div0, F));
    /* if (true) { return sel + wrapped } else { return 0 } ; unreachable code after it */
    nb_ir_inst *iff = nb_ir_if(&fx.b, nb_ir_const_i(&fx.b, fx.tt.t_bool, 1));
    fx.b.block = iff->blocks[0];
    nb_ir_jump(&fx.b, NB_IR_RETURN, nb_ir_binary(&fx.b, NB_IR_ADD, sel, nb_ir_convert(&fx.b, w, F)));
    fx.b.block = iff->blocks[1];
    nb_ir_jump(&fx.b, NB_IR_RETURN, nb_ir_const_f(&fx.b, F, 0));
    fx.b.block = f->body;
    NB_EXPECT(verify(f, NULL));
    NB_EXPECT(nb_ir_fold(f) > 0);
    NB_EXPECT(verify(f, NULL));
    nb_ir_dce(f);
    NB_EXPECT(verify(f, NULL));
    nb_strbuf o;
    nb_strbuf_init(&o);
    nb_ir_print_func(f, &o);
    /* everything folds to one constant: -4 + (-2147483648) */
    /* everything folds to one constant and a return (ids depend on argument evaluation order) */
    const char *txt = nb_strbuf_cstr(&o);
    int lines = 0;
    for (const char *q = txt; *q; q++) lines += *q == '\n';
    NB_EXPECT(strncmp(txt, "func k(in $x: float) -> float {\n  var $dead: float\n  %", 45) == 0);
    NB_EXPECT(strstr(txt, " = const -2.14748365e+09 : float\n  return %") != NULL);
    NB_EXPECT(lines == 5);
    if (lines != 5) fprintf(stderr, "%s", txt);
    nb_strbuf_free(&o);
    fx_free(&fx);
}

static void test_lowering(void)
{
    const char *src =
        "struct S { float3 pos[2]; float w; };\n"
        "float f(inout S s, int i, float v) {\n"
        "  s.pos[i].x = v;\n"
        "  s.w += 1.0;\n"
        "  float t = 0;\n"
        "  [MaxIters(4)] while (t < v) { t += 1.0; if (t > 2.0) break; }\n"
        "  return i > 0 && s.w > 0 ? t : -t;\n"
        "}\n"
        "int dead_code(int x) { return x * (2 + 3); x = 4; }\n";
    nb_program *p = NULL;
    NB_REQUIRE_OK(nb_program_compile_source("t.nb", src, NULL, &p));
    nb_strbuf o;
    nb_strbuf_init(&o);
    NB_EXPECT_OK(nb_program_dump_ir(p, "f", &o));
    const char *ir = nb_strbuf_cstr(&o);
    NB_EXPECT(strstr(ir, "func f(inout $s: S, in $i: int, in $v: float) -> float") != NULL);
    NB_EXPECT(strstr(ir, "store $s.0[%") != NULL && strstr(ir, "][%") != NULL); /* one store, 3-step path */
    NB_EXPECT(strstr(ir, "loop max_iters=4") != NULL);
    NB_EXPECT(strstr(ir, "land") != NULL);
    nb_strbuf_clear(&o);
    NB_EXPECT_OK(nb_program_dump_ir(p, "dead_code", &o));
    ir = nb_strbuf_cstr(&o);
    NB_EXPECT(strstr(ir, "const 5 : int") != NULL); /* 2 + 3 folded */
    NB_EXPECT(strstr(ir, "const 4") == NULL);       /* unreachable store dropped */
    nb_strbuf_free(&o);
    nb_program_free(p);

    /* fwd_diff lowers to a call of the generated forward derivative (lang/ad.h) */
    NB_REQUIRE_OK(nb_program_compile_source("d.nb",
                                            "[Differentiable] float sq(float x) { return x * x; }\n"
                                            "float g(float x) { DifferentialPair<float> dp = diffPair(x, 1.0); return fwd_diff(sq)(dp).d; }\n",
                                            NULL, &p));
    nb_strbuf_init(&o);
    NB_EXPECT_OK(nb_program_dump_ir(p, NULL, &o));
    NB_EXPECT(strstr(nb_strbuf_cstr(&o), "func sq_fwd(") != NULL);
    nb_strbuf_free(&o);
    nb_program_free(p);
}

int main(int argc, char **argv)
{
    NB_TEST_MAIN(argc, argv, test_build_print, test_structured_print, test_verifier_catches, test_fold_dce, test_lowering);
}
