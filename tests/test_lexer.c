/* Lexer and diagnostics rendering: every token kind, every literal form, lexical errors with
 * file:line:col, source line and caret. */
#include "lang/lexer.h"
#include "nb_test.h"

typedef struct lexed {
    nb_source_set src;
    nb_arena arena;
    nb_token *toks;
    int n;
} lexed;

static void lex_text(lexed *l, const char *text) {
    nb_source_set_init(&l->src);
    nb_arena_init(&l->arena, 0);
    int f = nb_source_add(&l->src, "t.nb", text, strlen(text));
    l->toks = nb_lex(&l->src, f, &l->arena, &l->n);
}

static void lex_free(lexed *l) {
    nb_arena_destroy(&l->arena);
    nb_source_set_free(&l->src);
}

/* Rendered diagnostics of l (static buffer). */
static const char *rendered(lexed *l) {
    static char buf[8192];
    nb_strbuf sb;
    nb_strbuf_init(&sb);
    nb_diag_render(&l->src, &sb);
    snprintf(buf, sizeof buf, "%s", nb_strbuf_cstr(&sb));
    nb_strbuf_free(&sb);
    return buf;
}

/* Expects the kinds of text's tokens (without the final EOF) to be `kinds`. */
static int kinds_are(const char *text, const nb_tok_kind *kinds, int n) {
    lexed l;
    lex_text(&l, text);
    int ok = l.toks && l.n == n + 1 && l.src.nerrors == 0 && l.toks[n].kind == NB_TOK_EOF;
    for (int i = 0; ok && i < n; i++)
        if (l.toks[i].kind != kinds[i]) {
            fprintf(stderr, "  token %d of \"%s\": %s, expected %s\n", i, text, nb_tok_name(l.toks[i].kind),
                    nb_tok_name(kinds[i]));
            ok = 0;
        }
    if (!ok && l.toks && l.n != n + 1) fprintf(stderr, "  \"%s\": %d tokens, expected %d\n", text, l.n - 1, n);
    lex_free(&l);
    return ok;
}

static void test_punctuation(void) {
    const char *text = "( ) { } [ ] ; , . : :: ? + - * / % & | ^ ~ ! && || << >> < > <= >= == != "
                       "= += -= *= /= %= &= |= ^= <<= >>= ++ -- ->";
    static const nb_tok_kind k[] = {
        NB_TOK_LPAREN, NB_TOK_RPAREN, NB_TOK_LBRACE, NB_TOK_RBRACE, NB_TOK_LBRACKET, NB_TOK_RBRACKET,
        NB_TOK_SEMI, NB_TOK_COMMA, NB_TOK_DOT, NB_TOK_COLON, NB_TOK_COLONCOLON, NB_TOK_QUESTION,
        NB_TOK_PLUS, NB_TOK_MINUS, NB_TOK_STAR, NB_TOK_SLASH, NB_TOK_PERCENT, NB_TOK_AMP, NB_TOK_PIPE,
        NB_TOK_CARET, NB_TOK_TILDE, NB_TOK_NOT, NB_TOK_ANDAND, NB_TOK_OROR, NB_TOK_SHL, NB_TOK_SHR,
        NB_TOK_LT, NB_TOK_GT, NB_TOK_LE, NB_TOK_GE, NB_TOK_EQ, NB_TOK_NE, NB_TOK_ASSIGN,
        NB_TOK_PLUS_ASSIGN, NB_TOK_MINUS_ASSIGN, NB_TOK_STAR_ASSIGN, NB_TOK_SLASH_ASSIGN,
        NB_TOK_PERCENT_ASSIGN, NB_TOK_AMP_ASSIGN, NB_TOK_PIPE_ASSIGN, NB_TOK_CARET_ASSIGN,
        NB_TOK_SHL_ASSIGN, NB_TOK_SHR_ASSIGN, NB_TOK_INC, NB_TOK_DEC, NB_TOK_ARROW};
    NB_EXPECT(kinds_are(text, k, (int)(sizeof k / sizeof k[0])));
    /* maximal munch without spaces */
    static const nb_tok_kind k3[] = {NB_TOK_IDENT, NB_TOK_SHL_ASSIGN, NB_TOK_IDENT, NB_TOK_INC, NB_TOK_PLUS,
                                     NB_TOK_IDENT, NB_TOK_COLONCOLON, NB_TOK_IDENT, NB_TOK_SHR_ASSIGN,
                                     NB_TOK_ANDAND, NB_TOK_AMP};
    NB_EXPECT(kinds_are("a<<=b+++c::d>>=&&&", k3, 11));
}

static void test_keywords_and_idents(void) {
    const char *text = "struct return if else for while do break continue switch case default true false "
                       "in out inout static const extern import no_diff typedef typealias let var public "
                       "inline this";
    static const nb_tok_kind k[] = {
        NB_TOK_KW_STRUCT, NB_TOK_KW_RETURN, NB_TOK_KW_IF, NB_TOK_KW_ELSE, NB_TOK_KW_FOR, NB_TOK_KW_WHILE,
        NB_TOK_KW_DO, NB_TOK_KW_BREAK, NB_TOK_KW_CONTINUE, NB_TOK_KW_SWITCH, NB_TOK_KW_CASE,
        NB_TOK_KW_DEFAULT, NB_TOK_KW_TRUE, NB_TOK_KW_FALSE, NB_TOK_KW_IN, NB_TOK_KW_OUT, NB_TOK_KW_INOUT,
        NB_TOK_KW_STATIC, NB_TOK_KW_CONST, NB_TOK_KW_EXTERN, NB_TOK_KW_IMPORT, NB_TOK_KW_NO_DIFF,
        NB_TOK_KW_TYPEDEF, NB_TOK_KW_TYPEALIAS, NB_TOK_KW_LET, NB_TOK_KW_VAR, NB_TOK_KW_PUBLIC,
        NB_TOK_KW_INLINE, NB_TOK_KW_THIS};
    NB_EXPECT(kinds_are(text, k, (int)(sizeof k / sizeof k[0])));
    /* keywords are whole words; types and intrinsics are identifiers */
    static const nb_tok_kind ids[] = {NB_TOK_IDENT, NB_TOK_IDENT, NB_TOK_IDENT, NB_TOK_IDENT, NB_TOK_IDENT,
                                      NB_TOK_IDENT, NB_TOK_IDENT, NB_TOK_IDENT};
    NB_EXPECT(kinds_are("structs _if inout2 float3x3 fwd_diff Tensor __init x_1", ids, 8));

    lexed l;
    lex_text(&l, "  foo\n\tbar_2 ");
    NB_EXPECT(l.n == 3);
    NB_EXPECT(l.toks[0].len == 3 && memcmp(l.toks[0].start, "foo", 3) == 0);
    NB_EXPECT(l.toks[0].loc.file == 0 && l.toks[0].loc.line == 1 && l.toks[0].loc.col == 3);
    NB_EXPECT(l.toks[1].loc.line == 2 && l.toks[1].loc.col == 2 && l.toks[1].len == 5);
    NB_EXPECT(l.toks[2].kind == NB_TOK_EOF && l.toks[2].loc.line == 2);
    lex_free(&l);
}

static void test_int_literals(void) {
    static const struct {
        const char *text;
        uint64_t value;
        int is_unsigned;
    } cases[] = {
        {"0", 0, 0},          {"12", 12, 0},        {"12u", 12, 1},      {"12U", 12, 1},
        {"0x1F", 31, 0},      {"0X1fu", 31, 1},     {"0xFFFFFFFF", 0xFFFFFFFFu, 0},
        {"010", 8, 0},        {"0b101", 5, 0},      {"7l", 7, 0},        {"7ull", 7, 1},
        {"18446744073709551615", UINT64_MAX, 0},    {"0xFFFFFFFFFFFFFFFF", UINT64_MAX, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        lexed l;
        lex_text(&l, cases[i].text);
        int ok = l.n == 2 && l.toks[0].kind == NB_TOK_INT && l.toks[0].v.i.value == cases[i].value &&
                 l.toks[0].v.i.is_unsigned == cases[i].is_unsigned && l.src.nerrors == 0 &&
                 l.toks[0].len == (int)strlen(cases[i].text);
        if (!ok) fprintf(stderr, "  int literal '%s' misread\n", cases[i].text);
        NB_EXPECT(ok);
        lex_free(&l);
    }
}

static void test_float_literals(void) {
    static const struct {
        const char *text;
        double value;
        int suffix;
    } cases[] = {
        {"1.0", 1.0, 0},     {"1.", 1.0, 0},      {".5", 0.5, 0},       {"1e3", 1000.0, 0},
        {"1.5e-3", 1.5e-3, 0}, {"2E+2", 200.0, 0}, {"1.0f", 1.0, 'f'},   {"1.0F", 1.0, 'f'},
        {"1.0h", 1.0, 'h'},  {"1.0l", 1.0, 'l'},  {"1.0L", 1.0, 'l'},   {"2.5lf", 2.5, 'l'},
        {"3e2f", 300.0, 'f'}, {".25h", 0.25, 'h'}, {"0.1", 0.1, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        lexed l;
        lex_text(&l, cases[i].text);
        int ok = l.n == 2 && l.toks[0].kind == NB_TOK_FLOAT && l.toks[0].v.f.value == cases[i].value &&
                 l.toks[0].v.f.suffix == cases[i].suffix && l.src.nerrors == 0;
        if (!ok) fprintf(stderr, "  float literal '%s' misread\n", cases[i].text);
        NB_EXPECT(ok);
        lex_free(&l);
    }
    /* member access on an integer is not a float: 1.5.x lexes as 1.5 . x */
    static const nb_tok_kind k[] = {NB_TOK_FLOAT, NB_TOK_DOT, NB_TOK_IDENT, NB_TOK_IDENT, NB_TOK_DOT,
                                    NB_TOK_IDENT};
    NB_EXPECT(kinds_are("1.5 .x a.b", k, 6));
}

static void test_strings_and_comments(void) {
    static const nb_tok_kind k[] = {NB_TOK_KW_IMPORT, NB_TOK_STRING, NB_TOK_SEMI, NB_TOK_IDENT, NB_TOK_IDENT};
    NB_EXPECT(kinds_are("import \"a/b \\\"c\\\".nb\"; // comment\n/* block\n * comment */ x /**/y", k, 5));
    lexed l;
    lex_text(&l, "/* line 1\nline 2 */ a // x\r\nb");
    NB_EXPECT(l.n == 3 && l.toks[0].loc.line == 2 && l.toks[0].loc.col == 11);
    NB_EXPECT(l.toks[1].loc.line == 3 && l.toks[1].loc.col == 1);
    lex_free(&l);
    /* CRLF line endings: the rendered source line has no '\r' */
    lex_text(&l, "a\r\n  @\r\n");
    NB_EXPECT(strcmp(rendered(&l), "t.nb:2:3: error: invalid character '@'\n  @\n  ^\n") == 0);
    lex_free(&l);
}

/* One lexical error: the rendered text must be exactly `expect`. */
static void expect_render(const char *text, const char *expect) {
    lexed l;
    lex_text(&l, text);
    const char *got = rendered(&l);
    if (strcmp(got, expect) != 0) {
        fprintf(stderr, "  source:\n%s\n  rendered:\n%s  expected:\n%s", text, got, expect);
        nb_test_failures_++;
    }
    NB_EXPECT(l.toks && l.toks[l.n - 1].kind == NB_TOK_EOF);
    lex_free(&l);
}

static void test_lex_errors(void) {
    expect_render("float x = a @ b;", "t.nb:1:13: error: invalid character '@'\nfloat x = a @ b;\n            ^\n");
    expect_render("x\n\t`y", "t.nb:2:2: error: invalid character '`'\n\t`y\n\t^\n");
    {   /* `$` is a token (other targets' asm in skipped __target_switch cases); the parser refuses it elsewhere */
        static const nb_tok_kind k[] = {NB_TOK_DOLLAR, NB_TOK_DOLLAR, NB_TOK_IDENT, NB_TOK_DOLLAR, NB_TOK_IDENT};
        NB_EXPECT(kinds_are("$$T $x", k, 5));
    }
    expect_render("a /* open\n\nb", "t.nb:1:3: error: unterminated block comment\na /* open\n  ^\n");
    expect_render("int a = 18446744073709551616;",
                  "t.nb:1:9: error: integer literal too large\nint a = 18446744073709551616;\n        ^\n");
    expect_render("x = 0x;", "t.nb:1:5: error: expected hexadecimal digits after '0x'\nx = 0x;\n    ^\n");
    expect_render("x = 1e+;", "t.nb:1:6: error: exponent has no digits\nx = 1e+;\n     ^\n");
    expect_render("x = 12abc;", "t.nb:1:7: error: invalid suffix 'abc' on integer literal\nx = 12abc;\n      ^\n");
    expect_render("x = 1.0q;", "t.nb:1:8: error: invalid suffix 'q' on floating-point literal\nx = 1.0q;\n       ^\n");
    expect_render("x = 09;", "t.nb:1:6: error: invalid digit '9' in octal literal\nx = 09;\n     ^\n");
    expect_render("x = 1e999;", "t.nb:1:5: error: floating-point literal too large\nx = 1e999;\n    ^\n");
    expect_render("import \"abc\n", "t.nb:1:8: error: unterminated string literal\nimport \"abc\n       ^\n");
    expect_render("x\xc3\xa9", "t.nb:1:2: error: invalid character '\xc3\xa9' (U+00E9)\nx\xc3\xa9\n ^\n");
    expect_render("\xff", "t.nb:1:1: error: invalid character '\\xFF'\n\xff\n^\n");
    /* a NUL byte inside the text is an invalid character, shown as a space in the source line */
    lexed l;
    nb_source_set_init(&l.src);
    nb_arena_init(&l.arena, 0);
    int f = nb_source_add(&l.src, "t.nb", "a\0b", 3);
    l.toks = nb_lex(&l.src, f, &l.arena, &l.n);
    NB_EXPECT(l.n == 4 && l.toks[1].kind == NB_TOK_ERROR && l.toks[2].kind == NB_TOK_IDENT);
    NB_EXPECT(strcmp(rendered(&l), "t.nb:1:2: error: invalid character '\\x00'\na b\n ^\n") == 0);
    lex_free(&l);
    /* lexing goes on after errors: every error is reported, tokens continue */
    lex_text(&l, "a @ b ` c");
    NB_EXPECT(l.src.nerrors == 2 && l.n == 6 && l.toks[4].kind == NB_TOK_IDENT);
    lex_free(&l);
}

static void test_diag_status_and_cap(void) {
    nb_source_set src;
    nb_source_set_init(&src);
    NB_EXPECT(src.max_errors == 50);
    int f = nb_source_add(&src, "dir/m.nb", "one\ntwo\n", 8);
    NB_EXPECT(f == 0 && strcmp(src.files[0].name, "m") == 0 && src.files[0].nlines == 3);
    NB_EXPECT_OK(nb_diag_status(&src));
    nb_loc l2 = {f, 2, 2}, none = {-1, 0, 0}, past = {f, 2, 40};
    NB_EXPECT(nb_diag_error(&src, l2, "bad %s", "thing") == NB_ERR_COMPILE);
    NB_EXPECT(nb_diag_note(&src, none, "see here") == NB_OK);
    nb_diag_add(&src, NB_DIAG_WARNING, past, "caret clamps to the line end");
    NB_EXPECT_ERR(nb_diag_status(&src), NB_ERR_COMPILE,
                  "dir/m.nb:2:2: error: bad thing\ntwo\n ^\nnote: see here\n"
                  "dir/m.nb:2:40: warning: caret clamps to the line end\ntwo\n   ^");
    size_t n;
    const char *line = nb_source_line(&src, f, 3, &n);
    NB_EXPECT(line && n == 0);
    NB_EXPECT(nb_source_line(&src, f, 4, &n) == NULL);
    NB_EXPECT(nb_source_offset(&src, l2) == 5);
    /* the cap keeps the first max_errors and counts the rest */
    src.max_errors = 3;
    for (int i = 0; i < 5; i++) nb_diag_error(&src, l2, "e%d", i);
    NB_EXPECT(src.nerrors == 6);
    NB_EXPECT_ERR(nb_diag_status(&src), NB_ERR_COMPILE, "note: 3 more errors not shown (limit 3)");
    NB_EXPECT(strstr(nb_last_error(), "e1") && !strstr(nb_last_error(), "e2"));
    nb_source_set_free(&src);

    /* loading files */
    nb_source_set_init(&src);
    NB_EXPECT_ERR(nb_source_load(&src, "/nonexistent/dir/x.nb", &f), NB_ERR_IO, "/nonexistent/dir/x.nb");
    NB_EXPECT_OK(nb_source_add_search_path(&src, "/tmp"));
    NB_EXPECT(src.nsearch == 1 && strcmp(src.search_paths[0], "/tmp") == 0);
    char path[] = "/tmp/nb_lexer_test_XXXXXX";
    int fd = mkstemp(path);
    if (fd >= 0) {
        FILE *fp = fdopen(fd, "w");
        fputs("float x;\n", fp);
        fclose(fp);
        NB_EXPECT_OK(nb_source_load(&src, path, &f));
        NB_EXPECT(src.files[f].len == 9 && strcmp(src.files[f].text, "float x;\n") == 0);
        remove(path);
    }
    nb_source_set_free(&src);
}

static void test_tok_names(void) {
    NB_EXPECT(strcmp(nb_tok_name(NB_TOK_PLUS_ASSIGN), "'+='") == 0);
    NB_EXPECT(strcmp(nb_tok_name(NB_TOK_IDENT), "identifier") == 0);
    NB_EXPECT(strcmp(nb_tok_name(NB_TOK_EOF), "end of file") == 0);
    for (int k = 0; k < NB_TOK_COUNT; k++) NB_EXPECT(strcmp(nb_tok_name((nb_tok_kind)k), "unknown token") != 0);
}

/* The preprocessor's view: '#' / '##' tokens, line starts, blanks, continuations, deferred errors. */
static void test_directive_tokens(void) {
    lexed l;
    lex_text(&l, "  #define A(x) #x a##b \\\n  c\n# x\nd/**/e");
    NB_EXPECT(l.src.nerrors == 0 && l.n == 17);
    if (l.n == 17) {
        NB_EXPECT(l.toks[0].kind == NB_TOK_HASH && (l.toks[0].flags & NB_TOKF_BOL) && (l.toks[0].flags & NB_TOKF_SPACE));
        NB_EXPECT(l.toks[1].kind == NB_TOK_IDENT && !(l.toks[1].flags & (NB_TOKF_BOL | NB_TOKF_SPACE)));
        NB_EXPECT(l.toks[3].kind == NB_TOK_LPAREN && !(l.toks[3].flags & NB_TOKF_SPACE)); /* A( : function-like */
        NB_EXPECT(l.toks[6].kind == NB_TOK_HASH && !(l.toks[6].flags & NB_TOKF_BOL));
        NB_EXPECT(l.toks[9].kind == NB_TOK_HASHHASH);
        /* the continued line: 'c' is on line 2 but not a line start */
        NB_EXPECT(l.toks[11].loc.line == 2 && !(l.toks[11].flags & NB_TOKF_BOL) && (l.toks[11].flags & NB_TOKF_SPACE));
        NB_EXPECT(l.toks[12].kind == NB_TOK_HASH && (l.toks[12].flags & NB_TOKF_BOL) && l.toks[12].loc.line == 3);
        NB_EXPECT(l.toks[14].flags & NB_TOKF_BOL);                     /* d */
        NB_EXPECT(l.toks[15].flags & NB_TOKF_SPACE);                   /* e after a comment */
    }
    lex_free(&l);
    /* nb_lex_raw keeps token errors for the preprocessor: nothing is reported until asked */
    nb_source_set_init(&l.src);
    nb_arena_init(&l.arena, 0);
    int f = nb_source_add(&l.src, "t.nb", "x = 12abc @", 11);
    l.toks = nb_lex_raw(&l.src, f, &l.arena, &l.n);
    NB_EXPECT(l.src.nerrors == 0 && l.n == 5 && l.toks[2].kind == NB_TOK_ERROR && l.toks[3].kind == NB_TOK_ERROR);
    if (l.n == 5) {
        nb_lex_report(&l.src, &l.toks[2]);
        NB_EXPECT(strcmp(rendered(&l), "t.nb:1:7: error: invalid suffix 'abc' on integer literal\nx = 12abc @\n      ^\n") == 0);
    }
    lex_free(&l);
}

int main(int argc, char **argv) {
    NB_TEST_MAIN(argc, argv, test_punctuation, test_keywords_and_idents, test_int_literals,
                 test_float_literals, test_strings_and_comments, test_lex_errors, test_diag_status_and_cap,
                 test_tok_names, test_directive_tokens);
}
