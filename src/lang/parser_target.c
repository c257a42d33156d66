/* Parser: Slang's target-specific statements (checked in check_target.c).
 *
 *   __target_switch { case cuda: … case cpp: case c: … default: … }
 *   __intrinsic_asm "text" [, operand…];
 *   __requirePrelude("text");
 *   __target_intrinsic(cuda, "text") before a function (Slang's older spelling): the function's
 *   body becomes `__target_switch { case cuda: __intrinsic_asm "text"; default: body }`
 *
 * These are identifiers in Slang (not keywords), recognised at the start of a statement. The
 * string texts are decoded here (C escapes) so later passes see the text as it will be emitted.
 */
#include <string.h>

#include "lang/parser_impl.h"

static nb_stmt *new_stmt(nb_parser *p, nb_stmt_kind kind, nb_loc loc) {
    nb_stmt *s = np_alloc(p, sizeof *s);
    s->kind = kind;
    s->loc = loc;
    s->max_iters = -1;
    return s;
}

static int is_ident(nb_parser *p, const char *name) {
    const nb_token *t = np_cur(p);
    return t->kind == NB_TOK_IDENT && (size_t)t->len == strlen(name) && memcmp(t->start, name, (size_t)t->len) == 0;
}

/* The decoded contents of the current string token (\n \t \\ \" \' \0 and \xHH; others kept). */
static const char *decode_string(nb_parser *p) {
    const nb_token *t = np_cur(p);
    const char *s = t->start + 1;
    int n = t->len >= 2 ? t->len - 2 : 0;
    char *out = np_alloc(p, (size_t)n + 1);
    int k = 0;
    for (int i = 0; i < n; i++) {
        char c = s[i];
        if (c == '\\' && i + 1 < n) {
            char e = s[++i];
            switch (e) {
            case 'n': c = '\n'; break;
            case 't': c = '\t'; break;
            case 'r': c = '\r'; break;
            case '0': c = '\0'; break;
            case '\\': case '"': case '\'': c = e; break;
            case 'x': {
                int v = 0, d = 0;
                while (d < 2 && i + 1 < n && strchr("0123456789abcdefABCDEF", s[i + 1])) {
                    char h = s[++i];
                    v = v * 16 + (h <= '9' ? h - '0' : (h | 32) - 'a' + 10);
                    d++;
                }
                c = (char)v;
                break;
            }
            default: out[k++] = '\\'; c = e; break;
            }
        }
        out[k++] = c;
    }
    out[k] = '\0';
    return out;
}

static const char *expect_string(nb_parser *p, const char *after) {
    if (np_kind(p) != NB_TOK_STRING) {
        char found[64];
        np_describe(p, np_cur(p), found, sizeof found);
        np_error_here(p, "expected a string literal after '%s', found %s", after, found);
        return NULL;
    }
    const char *s = decode_string(p);
    np_advance(p);
    return s;
}

/* Target names of Slang's __target_switch cases (capability atoms): the CPU back end answers to
 * `cpp` and `c`, the CUDA one to `cuda` (and `cuda_sm_*`); the other targets are accepted and
 * never chosen. Returns 0 for an unknown name. */
static unsigned target_bits(const char *name) {
    static const char *const other[] = {"hlsl", "glsl", "spirv", "metal", "wgsl", "llvm", "dxil", "dxbc",
                                        "spirv_asm", "torch", "host", NULL};
    if (!strcmp(name, "cpp") || !strcmp(name, "c")) return NB_TGT_C;
    if (!strcmp(name, "cuda") || !strncmp(name, "cuda_sm_", 8)) return NB_TGT_CUDA;
    for (int i = 0; other[i]; i++)
        if (!strcmp(name, other[i])) return NB_TGT_OTHER;
    if (!strncmp(name, "spirv_", 6) || !strncmp(name, "glsl_", 5) || !strncmp(name, "hlsl_", 5) ||
        !strncmp(name, "sm_", 3) || !strncmp(name, "metallib", 8))
        return NB_TGT_OTHER;
    return 0;
}

static nb_stmt *parse_target_switch(nb_parser *p, nb_loc loc) {
    nb_stmt *s = new_stmt(p, NB_ST_TARGET_SWITCH, loc);
    np_advance(p);
    nb_loc open = np_loc(p);
    if (!np_accept(p, NB_TOK_LBRACE)) {
        char found[64];
        np_describe(p, np_cur(p), found, sizeof found);
        np_error_here(p, "expected '{' after '__target_switch', found %s", found);
        return s;
    }
    nb_pvec cases = {0}, body = {0};
    nb_target_case *cur = NULL;
    while (np_kind(p) != NB_TOK_RBRACE && np_kind(p) != NB_TOK_EOF) {
        int before = p->pos;
        nb_tok_kind k = np_kind(p);
        if (k == NB_TOK_KW_CASE || k == NB_TOK_KW_DEFAULT) {
            if (!cur || body.n > 0) { /* a new group of labels */
                if (cur) {
                    cur->body = (nb_stmt **)np_finish(p, &body);
                    cur->nbody = body.n;
                }
                body = (nb_pvec){0};
                cur = np_alloc(p, sizeof *cur);
                cur->loc = np_loc(p);
                np_push(p, &cases, cur);
            }
            np_advance(p);
            if (k == NB_TOK_KW_CASE) {
                if (np_kind(p) != NB_TOK_IDENT) {
                    char found[64];
                    np_describe(p, np_cur(p), found, sizeof found);
                    np_error_here(p, "expected a target name (cuda, cpp, …) after 'case', found %s", found);
                } else {
                    const char *name = np_tok_text(p);
                    unsigned b = target_bits(name);
                    if (!b)
                        np_error_here(p, "unknown target '%s' in __target_switch (the CPU back end is 'cpp' or 'c', "
                                         "CUDA is 'cuda')", name);
                    cur->targets |= b;
                    np_advance(p);
                }
            } else {
                cur->is_default = 1;
            }
            if (!p->panic && !np_accept(p, NB_TOK_COLON)) {
                char found[64];
                np_describe(p, np_cur(p), found, sizeof found);
                np_error_here(p, "expected ':' after the target label, found %s", found);
            }
        } else if (cur && cur->targets == NB_TGT_OTHER && !cur->is_default) {
            /* a case only for targets nabla never compiles (spirv, hlsl, …): its body may use their
             * own syntax (`return spirv_asm { OpExtInst $$T result glsl450 27 $x };`), so it is
             * skipped unparsed, braces balanced, up to the next label or the switch's end */
            int depth = 0;
            while (np_kind(p) != NB_TOK_EOF) {
                nb_tok_kind t = np_kind(p);
                if (depth == 0 && (t == NB_TOK_KW_CASE || t == NB_TOK_KW_DEFAULT || t == NB_TOK_RBRACE)) break;
                if (t == NB_TOK_LBRACE) depth++;
                else if (t == NB_TOK_RBRACE) depth--;
                np_advance(p);
            }
        } else {
            nb_stmt *st = np_parse_stmt(p);
            if (!cur) np_error_at(p, st->loc, "statement in '__target_switch' before the first 'case' label");
            else np_push(p, &body, st);
        }
        if (p->panic) np_sync(p);
        if (p->pos == before && np_kind(p) != NB_TOK_RBRACE) np_advance(p);
    }
    if (cur) {
        cur->body = (nb_stmt **)np_finish(p, &body);
        cur->nbody = body.n;
    }
    np_expect_close(p, NB_TOK_RBRACE, open);
    s->u.tswitch.ncases = cases.n;
    if (cases.n) {
        s->u.tswitch.cases = np_alloc(p, sizeof(nb_target_case) * (size_t)cases.n);
        for (int i = 0; i < cases.n; i++) s->u.tswitch.cases[i] = *(nb_target_case *)cases.items[i];
    }
    return s;
}

static nb_stmt *parse_asm(nb_parser *p, nb_loc loc) {
    nb_stmt *s = new_stmt(p, NB_ST_ASM, loc);
    np_advance(p);
    s->u.asm_s.text_loc = np_loc(p);
    s->u.asm_s.text = expect_string(p, "__intrinsic_asm");
    if (!s->u.asm_s.text) return s;
    nb_pvec args = {0};
    while (!p->panic && np_accept(p, NB_TOK_COMMA)) np_push(p, &args, np_parse_expr(p));
    s->u.asm_s.args = (nb_expr **)np_finish(p, &args);
    s->u.asm_s.nargs = args.n;
    if (!p->panic) np_expect_semi(p, "'__intrinsic_asm'");
    return s;
}

static nb_stmt *parse_prelude(nb_parser *p, nb_loc loc) {
    nb_stmt *s = new_stmt(p, NB_ST_PRELUDE, loc);
    np_advance(p);
    nb_loc open = np_loc(p);
    if (!np_accept(p, NB_TOK_LPAREN)) {
        char found[64];
        np_describe(p, np_cur(p), found, sizeof found);
        np_error_here(p, "expected '(' after '__requirePrelude', found %s", found);
        return s;
    }
    s->u.prelude.text = expect_string(p, "__requirePrelude(");
    if (!s->u.prelude.text) return s;
    if (!np_expect_close(p, NB_TOK_RPAREN, open)) return s;
    np_expect_semi(p, "'__requirePrelude(…)'");
    return s;
}

/* `__target_intrinsic(target[, "text"])` (np_parse_attrs, the cursor on it): an attribute named
 * __target_intrinsic with the target as a NAME and the decoded text as a second NAME. */
nb_attr *np_parse_target_intrinsic(nb_parser *p) {
    nb_attr *a = np_alloc(p, sizeof *a);
    a->loc = np_loc(p);
    a->name = "__target_intrinsic";
    np_advance(p);
    nb_loc open = np_loc(p);
    np_advance(p); /* ( (checked by the caller) */
    nb_expr **args = np_alloc(p, sizeof *args * 2);
    if (np_kind(p) != NB_TOK_IDENT) {
        char found[64];
        np_describe(p, np_cur(p), found, sizeof found);
        np_error_here(p, "expected a target name (cuda, cpp, hlsl, …) after '__target_intrinsic(', found %s", found);
        return a;
    }
    args[0] = np_new_expr(p, NB_EX_NAME, np_loc(p));
    args[0]->u.name.name = np_tok_text(p);
    np_advance(p);
    a->args = args;
    a->nargs = 1;
    if (np_accept(p, NB_TOK_COMMA)) {
        nb_loc tl = np_loc(p);
        const char *t = expect_string(p, "__target_intrinsic(target,");
        if (!t) return a;
        args[1] = np_new_expr(p, NB_EX_NAME, tl);
        args[1]->u.name.name = t;
        a->nargs = 2;
    }
    np_expect_close(p, NB_TOK_RPAREN, open);
    return a;
}

/* Rewrites fn's body for its __target_intrinsic attributes (see the top of this file). A target
 * nabla never compiles is dropped; a C/CUDA one needs its text. */
void np_apply_target_intrinsics(nb_parser *p, nb_decl *fn) {
    if (p->spec) return; /* (a speculative parse: done again for real) */
    nb_pvec cases = {0};
    for (int i = 0; i < fn->attrs.count; i++) {
        const nb_attr *a = &fn->attrs.items[i];
        if (!a->name || strcmp(a->name, "__target_intrinsic") || a->nargs < 1) continue;
        unsigned b = target_bits(a->args[0]->u.name.name);
        if (!b) {
            /* (the declaration itself parsed: reported without the parser's error recovery) */
            nb_diag_error(p->src, a->args[0]->loc, "unknown target '%s' in __target_intrinsic (the CPU back end is 'cpp' or "
                        "'c', CUDA is 'cuda')", a->args[0]->u.name.name);
            continue;
        }
        if (b == NB_TGT_OTHER) continue;
        if (a->nargs < 2) {
            nb_diag_error(p->src, a->loc, "__target_intrinsic(%s) without a text (the same-named target function) is not "
                        "supported: write __target_intrinsic(%s, \"f($0)\")", a->args[0]->u.name.name,
                        a->args[0]->u.name.name);
            continue;
        }
        nb_stmt *as = new_stmt(p, NB_ST_ASM, a->loc);
        as->u.asm_s.text = a->args[1]->u.name.name;
        as->u.asm_s.text_loc = a->args[1]->loc;
        nb_target_case *tc = np_alloc(p, sizeof *tc);
        nb_stmt **body = np_alloc(p, sizeof *body);
        body[0] = as;
        tc->loc = a->loc;
        tc->targets = b;
        tc->body = body;
        tc->nbody = 1;
        np_push(p, &cases, tc);
    }
    if (!cases.n) return;
    if (fn->u.func.body) {
        nb_target_case *dc = np_alloc(p, sizeof *dc);
        dc->loc = fn->u.func.body->loc;
        dc->is_default = 1;
        dc->body = fn->u.func.body->u.block.items;
        dc->nbody = fn->u.func.body->u.block.count;
        np_push(p, &cases, dc);
    }
    nb_stmt *sw = new_stmt(p, NB_ST_TARGET_SWITCH, fn->loc);
    sw->u.tswitch.cases = np_alloc(p, sizeof(nb_target_case) * (size_t)cases.n);
    for (int i = 0; i < cases.n; i++) sw->u.tswitch.cases[i] = *(nb_target_case *)cases.items[i];
    sw->u.tswitch.ncases = cases.n;
    nb_stmt *blk = new_stmt(p, NB_ST_BLOCK, fn->u.func.body ? fn->u.func.body->loc : fn->loc);
    nb_stmt **items = np_alloc(p, sizeof *items);
    items[0] = sw;
    blk->u.block.items = items;
    blk->u.block.count = 1;
    fn->u.func.body = blk;
}

nb_stmt *np_parse_target_stmt(nb_parser *p, nb_loc loc) {
    if (np_kind(p) != NB_TOK_IDENT) return NULL;
    if (is_ident(p, "__target_switch")) return parse_target_switch(p, loc);
    if (is_ident(p, "__intrinsic_asm")) return parse_asm(p, loc);
    if (is_ident(p, "__requirePrelude")) return parse_prelude(p, loc);
    return NULL;
}
