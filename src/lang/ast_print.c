/* Debug printer for the syntax tree (S-expressions), used by the parser tests. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lang/lexer.h"
#include "lang/parser.h"

static void print_expr(const nb_expr *e, nb_strbuf *o);
static void print_stmt(const nb_stmt *s, nb_strbuf *o);

static const char *op_text(int op) {
    const char *n = nb_tok_name((nb_tok_kind)op);
    static _Thread_local char buf[16];
    if (op == NB_TOK_KW_NO_DIFF) return "no_diff";
    size_t len = strlen(n);
    if (len >= 2 && n[0] == '\'' && n[len - 1] == '\'' && len - 2 < sizeof buf) {
        memcpy(buf, n + 1, len - 2);
        buf[len - 2] = '\0';
        return buf;
    }
    return n;
}

/* Shortest %g form that reads back exactly, always with a '.' or an exponent. */
static void print_double(double v, nb_strbuf *o) {
    char buf[64];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, sizeof buf, "%.*g", prec, v);
        if (strtod(buf, NULL) == v) break;
    }
    nb_strbuf_append(o, buf);
    if (!strpbrk(buf, ".eEn")) nb_strbuf_append(o, ".0"); /* n: inf/nan */
}

static void print_attrs(nb_attr_list a, nb_strbuf *o) {
    for (int i = 0; i < a.count; i++) {
        nb_strbuf_printf(o, "[%s", a.items[i].name);
        if (a.items[i].args) {
            nb_strbuf_append_char(o, '(');
            for (int j = 0; j < a.items[i].nargs; j++) {
                if (j) nb_strbuf_append(o, ", ");
                print_expr(a.items[i].args[j], o);
            }
            nb_strbuf_append_char(o, ')');
        }
        nb_strbuf_append(o, "] ");
    }
}

void nb_ast_print_type(const nb_type_expr *t, nb_strbuf *o) {
    if (!t) {
        nb_strbuf_append(o, "_");
        return;
    }
    nb_strbuf_append(o, t->name ? t->name : "?");
    if (t->ntargs || t->targs || t->vargs) {
        nb_strbuf_append_char(o, '<');
        for (int i = 0; i < t->ntargs; i++) {
            if (i) nb_strbuf_append_char(o, ',');
            if (t->targs && t->targs[i]) nb_ast_print_type(t->targs[i], o);
            else if (t->vargs && t->vargs[i]) print_expr(t->vargs[i], o);
        }
        nb_strbuf_append_char(o, '>');
    }
    for (int i = 0; i < t->narray_dims; i++) {
        nb_strbuf_append_char(o, '[');
        if (t->array_dims[i]) print_expr(t->array_dims[i], o);
        nb_strbuf_append_char(o, ']');
    }
}

static void print_expr(const nb_expr *e, nb_strbuf *o) {
    if (!e) {
        nb_strbuf_append(o, "_");
        return;
    }
    switch (e->kind) {
    case NB_EX_INT:
        nb_strbuf_printf(o, "%llu%s", (unsigned long long)e->u.ilit.value, e->u.ilit.is_unsigned ? "u" : "");
        break;
    case NB_EX_FLOAT:
        print_double(e->u.flit.value, o);
        if (e->u.flit.kind == NB_SC_HALF) nb_strbuf_append_char(o, 'h');
        else if (e->u.flit.kind == NB_SC_DOUBLE) nb_strbuf_append_char(o, 'l');
        break;
    case NB_EX_BOOL: nb_strbuf_append(o, e->u.blit ? "true" : "false"); break;
    case NB_EX_NAME: nb_strbuf_append(o, e->u.name.name); break;
    case NB_EX_UNARY:
        nb_strbuf_printf(o, "(%s%s ", e->u.unary.postfix ? "post" : "", op_text(e->u.unary.op));
        print_expr(e->u.unary.operand, o);
        nb_strbuf_append_char(o, ')');
        break;
    case NB_EX_BINARY:
    case NB_EX_ASSIGN:
        nb_strbuf_printf(o, "(%s ", op_text(e->u.binary.op));
        print_expr(e->u.binary.lhs, o);
        nb_strbuf_append_char(o, ' ');
        print_expr(e->u.binary.rhs, o);
        nb_strbuf_append_char(o, ')');
        break;
    case NB_EX_TERNARY:
        nb_strbuf_append(o, "(? ");
        print_expr(e->u.ternary.cond, o);
        nb_strbuf_append_char(o, ' ');
        print_expr(e->u.ternary.then_e, o);
        nb_strbuf_append_char(o, ' ');
        print_expr(e->u.ternary.else_e, o);
        nb_strbuf_append_char(o, ')');
        break;
    case NB_EX_CALL:
        nb_strbuf_append(o, "(call ");
        print_expr(e->u.call.callee, o);
        for (int i = 0; i < e->u.call.nargs; i++) {
            nb_strbuf_append_char(o, ' ');
            if (e->u.call.arg_names && e->u.call.arg_names[i])
                nb_strbuf_printf(o, "%s: ", e->u.call.arg_names[i]);
            print_expr(e->u.call.args[i], o);
        }
        nb_strbuf_append_char(o, ')');
        break;
    case NB_EX_MEMBER:
        nb_strbuf_append(o, e->u.member.is_static ? "(:: " : "(. ");
        print_expr(e->u.member.base, o);
        nb_strbuf_printf(o, " %s)", e->u.member.member);
        break;
    case NB_EX_INDEX:
        nb_strbuf_append(o, "(index ");
        print_expr(e->u.index.base, o);
        for (int i = 0; i < e->u.index.nindices; i++) {
            nb_strbuf_append_char(o, ' ');
            print_expr(e->u.index.indices[i], o);
        }
        nb_strbuf_append_char(o, ')');
        break;
    case NB_EX_TYPE:
        nb_strbuf_append(o, "(type ");
        nb_ast_print_type(e->u.type.texpr, o);
        nb_strbuf_append_char(o, ')');
        break;
    case NB_EX_CAST:
        nb_strbuf_append(o, "(cast ");
        nb_ast_print_type(e->u.cast.texpr, o);
        nb_strbuf_append_char(o, ' ');
        print_expr(e->u.cast.operand, o);
        nb_strbuf_append_char(o, ')');
        break;
    case NB_EX_INIT_LIST:
        nb_strbuf_append_char(o, '{');
        for (int i = 0; i < e->u.init_list.nitems; i++) {
            if (i) nb_strbuf_append_char(o, ' ');
            print_expr(e->u.init_list.items[i], o);
        }
        nb_strbuf_append_char(o, '}');
        break;
    case NB_EX_STRING: nb_strbuf_append(o, e->u.str.text ? e->u.str.text : "\"\""); break;
    }
}

static void print_mods(unsigned m, nb_strbuf *o) {
    if (m & NB_MOD_PUBLIC) nb_strbuf_append(o, "public ");
    if (m & NB_MOD_EXTERN) nb_strbuf_append(o, "extern ");
    if (m & NB_MOD_STATIC) nb_strbuf_append(o, "static ");
    if (m & NB_MOD_CONST) nb_strbuf_append(o, "const ");
    if (m & NB_MOD_INLINE) nb_strbuf_append(o, "inline ");
    if (m & NB_MOD_NO_DIFF) nb_strbuf_append(o, "no_diff ");
}

static void print_decl(const nb_decl *d, nb_strbuf *o) {
    if (!d) {
        nb_strbuf_append(o, "_");
        return;
    }
    switch (d->kind) {
    case NB_DECL_IMPORT:
        nb_strbuf_printf(o, "(import \"%s\")", d->u.import.path ? d->u.import.path : "");
        return;
    case NB_DECL_TYPEDEF:
        nb_strbuf_printf(o, "(typedef %s ", d->name);
        if (d->u.tdef.texpr) nb_ast_print_type(d->u.tdef.texpr, o);
        else nb_strbuf_append(o, "associatedtype");
        nb_strbuf_append_char(o, ')');
        return;
    case NB_DECL_VAR:
        nb_strbuf_append(o, "(var ");
        print_attrs(d->attrs, o);
        print_mods(d->mods, o);
        nb_ast_print_type(d->u.var.texpr, o);
        nb_strbuf_printf(o, " %s", d->name);
        if (d->u.var.init) {
            nb_strbuf_append(o, " = ");
            print_expr(d->u.var.init, o);
        }
        nb_strbuf_append_char(o, ')');
        return;
    case NB_DECL_PARAM: {
        static const char *const dirs[] = {"", "out ", "inout "};
        if (d->u.param.is_type) { /* a type generic parameter `T : IFoo = float` */
            nb_strbuf_printf(o, "(type %s", d->name);
            for (int i = 0; i < d->u.param.nconstraints; i++) {
                nb_strbuf_append(o, i ? " & " : " : ");
                nb_ast_print_type(d->u.param.constraints[i], o);
            }
            if (d->u.param.default_type) {
                nb_strbuf_append(o, " = ");
                nb_ast_print_type(d->u.param.default_type, o);
            }
            nb_strbuf_append_char(o, ')');
            return;
        }
        nb_strbuf_append(o, "(param ");
        print_attrs(d->attrs, o);
        nb_strbuf_append(o, dirs[d->u.param.dir]);
        print_mods(d->mods, o);
        nb_ast_print_type(d->u.param.texpr, o);
        if (d->name[0]) nb_strbuf_printf(o, " %s", d->name);
        if (d->u.param.default_value) {
            nb_strbuf_append(o, " = ");
            print_expr(d->u.param.default_value, o);
        }
        nb_strbuf_append_char(o, ')');
        return;
    }
    case NB_DECL_FUNC:
        nb_strbuf_append(o, "(func ");
        print_attrs(d->attrs, o);
        print_mods(d->mods, o);
        nb_ast_print_type(d->u.func.ret, o);
        nb_strbuf_printf(o, " %s ", d->name);
        if (d->u.func.ngparams) {
            nb_strbuf_append_char(o, '<');
            for (int i = 0; i < d->u.func.ngparams; i++) {
                if (i) nb_strbuf_append_char(o, ' ');
                print_decl(d->u.func.gparams[i], o);
            }
            nb_strbuf_append(o, "> ");
        }
        nb_strbuf_append_char(o, '(');
        for (int i = 0; i < d->u.func.nparams; i++) {
            if (i) nb_strbuf_append_char(o, ' ');
            print_decl(d->u.func.params[i], o);
        }
        nb_strbuf_append_char(o, ')');
        if (d->u.func.body) {
            nb_strbuf_append_char(o, ' ');
            print_stmt(d->u.func.body, o);
        }
        nb_strbuf_append_char(o, ')');
        return;
    case NB_DECL_STRUCT:
    case NB_DECL_INTERFACE:
    case NB_DECL_EXTENSION:
        nb_strbuf_append(o, d->kind == NB_DECL_STRUCT ? "(struct " : d->kind == NB_DECL_EXTENSION ? "(extension " : "(interface ");
        print_attrs(d->attrs, o);
        nb_strbuf_append(o, d->name);
        if (d->u.strct.ngparams) {
            nb_strbuf_append(o, " <");
            for (int i = 0; i < d->u.strct.ngparams; i++) {
                if (i) nb_strbuf_append_char(o, ' ');
                print_decl(d->u.strct.gparams[i], o);
            }
            nb_strbuf_append_char(o, '>');
        }
        if (d->u.strct.nconforms) {
            nb_strbuf_append(o, " :");
            for (int i = 0; i < d->u.strct.nconforms; i++) nb_strbuf_printf(o, " %s", d->u.strct.conforms[i]);
        }
        for (int i = 0; i < d->u.strct.nfields; i++) {
            nb_strbuf_append_char(o, ' ');
            print_decl(d->u.strct.fields[i], o);
        }
        for (int i = 0; i < d->u.strct.nstatics; i++) {
            nb_strbuf_append_char(o, ' ');
            print_decl(d->u.strct.statics[i], o);
        }
        for (int i = 0; i < d->u.strct.nmethods; i++) {
            nb_strbuf_append_char(o, ' ');
            print_decl(d->u.strct.methods[i], o);
        }
        for (int i = 0; i < d->u.strct.ntypes; i++) {
            nb_strbuf_append_char(o, ' ');
            print_decl(d->u.strct.types[i], o);
        }
        nb_strbuf_append_char(o, ')');
        return;
    }
}

static void print_stmt(const nb_stmt *s, nb_strbuf *o) {
    if (!s) {
        nb_strbuf_append(o, "_");
        return;
    }
    print_attrs(s->attrs, o);
    switch (s->kind) {
    case NB_ST_BLOCK:
        nb_strbuf_append(o, "{");
        for (int i = 0; i < s->u.block.count; i++) {
            nb_strbuf_append_char(o, ' ');
            print_stmt(s->u.block.items[i], o);
        }
        nb_strbuf_append(o, s->u.block.count ? " }" : "}");
        break;
    case NB_ST_EXPR: print_expr(s->u.expr.expr, o); break;
    case NB_ST_VAR:
        if (s->u.var.count != 1) nb_strbuf_append(o, "(decls");
        for (int i = 0; i < s->u.var.count; i++) {
            if (i || s->u.var.count != 1) nb_strbuf_append_char(o, ' ');
            /* attributes are shared with the statement; print the decl without them */
            nb_decl tmp = *s->u.var.vars[i];
            tmp.attrs.count = 0;
            print_decl(&tmp, o);
        }
        if (s->u.var.count != 1) nb_strbuf_append_char(o, ')');
        break;
    case NB_ST_IF:
        nb_strbuf_append(o, "(if ");
        print_expr(s->u.if_s.cond, o);
        nb_strbuf_append_char(o, ' ');
        print_stmt(s->u.if_s.then_s, o);
        if (s->u.if_s.else_s) {
            nb_strbuf_append(o, " else ");
            print_stmt(s->u.if_s.else_s, o);
        }
        nb_strbuf_append_char(o, ')');
        break;
    case NB_ST_FOR:
        nb_strbuf_append(o, "(for ");
        print_stmt(s->u.for_s.init, o);
        nb_strbuf_append(o, "; ");
        print_expr(s->u.for_s.cond, o);
        nb_strbuf_append(o, "; ");
        print_expr(s->u.for_s.step, o);
        nb_strbuf_append_char(o, ' ');
        print_stmt(s->u.for_s.body, o);
        nb_strbuf_append_char(o, ')');
        break;
    case NB_ST_WHILE:
        nb_strbuf_append(o, "(while ");
        print_expr(s->u.while_s.cond, o);
        nb_strbuf_append_char(o, ' ');
        print_stmt(s->u.while_s.body, o);
        nb_strbuf_append_char(o, ')');
        break;
    case NB_ST_DO_WHILE:
        nb_strbuf_append(o, "(do ");
        print_stmt(s->u.while_s.body, o);
        nb_strbuf_append(o, " while ");
        print_expr(s->u.while_s.cond, o);
        nb_strbuf_append_char(o, ')');
        break;
    case NB_ST_SWITCH:
        nb_strbuf_append(o, "(switch ");
        print_expr(s->u.switch_s.value, o);
        for (int i = 0; i < s->u.switch_s.ncases; i++) {
            const nb_switch_case *c = &s->u.switch_s.cases[i];
            nb_strbuf_append(o, " (case");
            for (int j = 0; j < c->nvalues; j++) {
                nb_strbuf_append_char(o, ' ');
                print_expr(c->values[j], o);
            }
            if (c->is_default) nb_strbuf_append(o, " default");
            nb_strbuf_append_char(o, ':');
            for (int j = 0; j < c->nbody; j++) {
                nb_strbuf_append_char(o, ' ');
                print_stmt(c->body[j], o);
            }
            nb_strbuf_append_char(o, ')');
        }
        nb_strbuf_append_char(o, ')');
        break;
    case NB_ST_BREAK: nb_strbuf_append(o, "(break)"); break;
    case NB_ST_CONTINUE: nb_strbuf_append(o, "(continue)"); break;
    case NB_ST_RETURN:
        nb_strbuf_append(o, "(return");
        if (s->u.ret.value) {
            nb_strbuf_append_char(o, ' ');
            print_expr(s->u.ret.value, o);
        }
        nb_strbuf_append_char(o, ')');
        break;
    case NB_ST_EMPTY: nb_strbuf_append(o, "(empty)"); break;
    case NB_ST_TARGET_SWITCH:
        nb_strbuf_append(o, "(__target_switch");
        for (int i = 0; i < s->u.tswitch.ncases; i++) {
            const nb_target_case *c = &s->u.tswitch.cases[i];
            nb_strbuf_printf(o, " (case%s%s%s%s:", c->targets & NB_TGT_C ? " cpp" : "",
                             c->targets & NB_TGT_CUDA ? " cuda" : "", c->targets & NB_TGT_OTHER ? " other" : "",
                             c->is_default ? " default" : "");
            for (int j = 0; j < c->nbody; j++) {
                nb_strbuf_append_char(o, ' ');
                print_stmt(c->body[j], o);
            }
            nb_strbuf_append_char(o, ')');
        }
        nb_strbuf_append_char(o, ')');
        break;
    case NB_ST_ASM:
        nb_strbuf_printf(o, "(__intrinsic_asm \"%s\"", s->u.asm_s.text ? s->u.asm_s.text : "");
        for (int i = 0; i < s->u.asm_s.nargs; i++) {
            nb_strbuf_append_char(o, ' ');
            print_expr(s->u.asm_s.args[i], o);
        }
        nb_strbuf_append_char(o, ')');
        break;
    case NB_ST_PRELUDE:
        nb_strbuf_printf(o, "(__requirePrelude \"%s\")", s->u.prelude.text ? s->u.prelude.text : "");
        break;
    }
}

void nb_ast_print_expr(const nb_expr *e, nb_strbuf *out) { print_expr(e, out); }
void nb_ast_print_stmt(const nb_stmt *s, nb_strbuf *out) { print_stmt(s, out); }
void nb_ast_print_decl(const nb_decl *d, nb_strbuf *out) { print_decl(d, out); }

void nb_ast_print(const nb_module_ast *m, nb_strbuf *out) {
    if (!m) return;
    for (int i = 0; i < m->ndecls; i++) {
        print_decl(m->decls[i], out);
        nb_strbuf_append_char(out, '\n');
    }
}
