/* The tests/lang runner: kernel-language programs with their expectations in comments (Slang's
 * test style), run through the `nabla` CLI.
 *
 *   usage: lang_runner NABLA_BINARY TEST_DIR [NAME_FILTER]
 *
 * Test files: every .nb and .slang file of TEST_DIR (its subdirectories hold fixtures).
 * Directives (lines of a .nb file; a test is a TEST line and the EXPECT lines after it):
 *   //TEST: call FUNC ARG...     `nabla call FILE FUNC ARG... --device D` on the CPU and, when a
 *                                GPU is present, on CUDA; both must meet the expectation
 *   //TEST(cpu): call ...        CPU only
 *   //TEST: check                `nabla check FILE`
 *   //TEST: emit ARG...          `nabla emit FILE ARG...`
 *   //TEST: cli ARG...           `nabla ARG...` (FILE not added), e.g. usage errors
 *   //EXPECT: JSON               exit 0 and stdout equal as JSON (numbers within tolerance);
 *                                for check, `//EXPECT: ok` means exit 0
 *   //EXPECT-ERROR: TEXT         exit != 0 and stderr contains TEXT (several lines: all of them, up to
 *                                MAX_EXPECT per test; more is a failure)
 *   //EXPECT-EXIT: N             the exit code (with EXPECT-ERROR: instead of "!= 0")
 *   //EXPECT-CONTAINS: TEXT      exit 0 and stdout contains TEXT
 *   //TOL: RTOL ATOL             tolerance for the next test (default 1e-5 1e-6)
 *   //XFAIL: REASON              the next test is expected to fail (a known bug elsewhere);
 *                                it is reported as XFAIL, or XPASS once it passes (not an error:
 *                                remove the XFAIL line then)
 *   //XFAIL-FILE: REASON         every test of the file is expected to fail
 * Arguments are split at blanks outside brackets, braces and quotes ('…' quotes are removed).
 * The program runs in TEST_DIR with the file's bare name, so diagnostics read "add.nb:3:12: …";
 * %T in arguments is a scratch directory.
 *
 * Exit status: 0 when no test FAILed, 1 otherwise.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../../cli/json.h"
#include "nabla/nabla.h"

#define MAX_ARGS 64
#define MAX_EXPECT 64 /* EXPECT-ERROR / EXPECT-CONTAINS lines of one test; more is a failure */

typedef struct test {
    int line;
    char kind[16];          /* call / check / emit / cli */
    int cpu_only;
    char *args[MAX_ARGS];   /* after the kind */
    int nargs;
    char *expect_json;      /* EXPECT */
    char *errors[MAX_EXPECT];
    int nerrors;
    char *contains[MAX_EXPECT];
    int ncontains;
    int expect_exit;        /* -1: any non-zero with errors, 0 with EXPECT */
    double rtol, atol;
    char *xfail;
} test;

static const char *nabla_bin;
static char scratch[256];
static int npass, nfail, nxfail, nxpass;

static char *trim(char *s) {
    while (*s == ' ' || *s == '\t') s++;
    size_t n = strlen(s);
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\r' || s[n - 1] == '\n'))
        s[--n] = '\0';
    return s;
}

/* A copy of s with every %T replaced by the scratch directory. */
static char *subst(const char *s) {
    size_t n = strlen(s) + 1, sl = strlen(scratch);
    for (const char *p = s; (p = strstr(p, "%T")); p += 2) n += sl;
    char *out = malloc(n), *o = out;
    while (*s) {
        if (s[0] == '%' && s[1] == 'T') {
            memcpy(o, scratch, sl);
            o += sl;
            s += 2;
        } else {
            *o++ = *s++;
        }
    }
    *o = '\0';
    return out;
}

/* Splits at blanks outside []{}() and quotes; '…' quotes are stripped, "…" kept (JSON). */
static int split_args(const char *s, char **out, int max) {
    int n = 0;
    while (*s) {
        while (*s == ' ' || *s == '\t') s++;
        if (!*s) break;
        char buf[4096];
        size_t k = 0;
        int depth = 0;
        char q = 0;
        while (*s && (q || depth > 0 || (*s != ' ' && *s != '\t'))) {
            char c = *s++;
            if (q) {
                if (c == q) {
                    if (q == '"') buf[k++] = c;
                    q = 0;
                    continue;
                }
                if (c == '\\' && q == '"' && *s) {
                    buf[k++] = c;
                    c = *s++;
                }
            } else if (c == '\'' || c == '"') {
                q = c;
                if (c == '"') buf[k++] = c;
                continue;
            } else if (c == '[' || c == '{' || c == '(') {
                depth++;
            } else if (c == ']' || c == '}' || c == ')') {
                depth--;
            }
            if (k + 1 < sizeof buf) buf[k++] = c;
        }
        buf[k] = '\0';
        if (n < max) {
            out[n++] = subst(buf);
        }
    }
    return n;
}

static char *read_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    size_t got = fread(b, 1, (size_t)n, f);
    b[got] = '\0';
    fclose(f);
    return b;
}

/* Runs argv in dir; stdout/stderr into malloc'd strings; returns the exit code (-1 on signal). */
static int run(const char *dir, char **argv, char **out, char **err) {
    char op[300], ep[300];
    snprintf(op, sizeof op, "%s/stdout", scratch);
    snprintf(ep, sizeof ep, "%s/stderr", scratch);
    pid_t pid = fork();
    if (pid == 0) {
        int fo = open(op, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        int fe = open(ep, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fo < 0 || fe < 0 || chdir(dir) != 0) _exit(127);
        dup2(fo, 1);
        dup2(fe, 2);
        execv(argv[0], argv);
        _exit(127);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    *out = read_file(op);
    *err = read_file(ep);
    if (!*out) *out = strdup("");
    if (!*err) *err = strdup("");
    if (WIFSIGNALED(st)) return -WTERMSIG(st);
    return WEXITSTATUS(st);
}

static int check_result(const test *t, int rc, const char *out, const char *err, char *why,
                        size_t cap) {
    if (t->nerrors) {
        if (t->expect_exit >= 0 ? rc != t->expect_exit : rc <= 0) {
            snprintf(why, cap, "exit %d, expected %s", rc, t->expect_exit >= 0 ? "that code" : "an error");
            return 0;
        }
        for (int i = 0; i < t->nerrors; i++)
            if (!strstr(err, t->errors[i])) {
                snprintf(why, cap, "stderr lacks \"%s\"", t->errors[i]);
                return 0;
            }
        return 1;
    }
    if (rc != (t->expect_exit >= 0 ? t->expect_exit : 0)) {
        snprintf(why, cap, "exit %d", rc);
        return 0;
    }
    for (int i = 0; i < t->ncontains; i++)
        if (!strstr(out, t->contains[i])) {
            snprintf(why, cap, "stdout lacks \"%s\"", t->contains[i]);
            return 0;
        }
    if (t->expect_json) {
        if (!strcmp(t->kind, "check")) {
            if (!strstr(out, t->expect_json)) {
                snprintf(why, cap, "stdout lacks \"%s\"", t->expect_json);
                return 0;
            }
            return 1;
        }
        char e1[256], e2[256];
        nb_json *want = nb_json_parse(t->expect_json, e1, sizeof e1);
        nb_json *got = nb_json_parse(out, e2, sizeof e2);
        int ok = 0;
        if (!want) snprintf(why, cap, "bad EXPECT JSON: %s", e1);
        else if (!got) snprintf(why, cap, "output is not JSON: %s", e2);
        else if (!(ok = nb_json_equal(got, want, t->rtol, t->atol)))
            snprintf(why, cap, "output differs from the expectation");
        nb_json_free(want);
        nb_json_free(got);
        return ok;
    }
    return 1;
}

static void run_test(const char *dir, const char *file, const test *t, int have_cuda) {
    const char *devices[2] = {"cpu", "cuda"};
    int ndev = (!strcmp(t->kind, "call") && !t->cpu_only && have_cuda) ? 2 : 1;
    for (int d = 0; d < ndev; d++) {
        char *argv[MAX_ARGS + 8];
        int n = 0;
        argv[n++] = (char *)nabla_bin;
        if (strcmp(t->kind, "cli")) {
            argv[n++] = (char *)t->kind;
            argv[n++] = (char *)file;
        }
        for (int i = 0; i < t->nargs; i++) argv[n++] = t->args[i];
        if (!strcmp(t->kind, "call")) {
            argv[n++] = "--device";
            argv[n++] = (char *)devices[d];
        }
        argv[n] = NULL;
        char *out, *err, why[512] = "";
        int rc = run(dir, argv, &out, &err);
        int ok = check_result(t, rc, out, err, why, sizeof why);
        const char *tag = ndev > 1 || !strcmp(t->kind, "call") ? devices[d] : t->kind;
        if (ok && !t->xfail) {
            npass++;
        } else if (ok) {
            nxpass++;
            printf("XPASS %s:%d [%s] (remove the XFAIL: %s)\n", file, t->line, tag, t->xfail);
        } else if (t->xfail) {
            nxfail++;
            printf("XFAIL %s:%d [%s] %s\n", file, t->line, tag, t->xfail);
        } else {
            nfail++;
            printf("FAIL  %s:%d [%s] %s\n", file, t->line, tag, why);
            printf("      $");
            for (int i = 1; argv[i]; i++) printf(" %s", argv[i]);
            printf("\n      stdout: %s      stderr: %s", out[0] ? out : "(empty)\n",
                   err[0] ? err : "(empty)\n");
            if (t->expect_json) printf("      expected: %s\n", t->expect_json);
        }
        free(out);
        free(err);
    }
}

static void free_test(test *t) {
    for (int i = 0; i < t->nargs; i++) free(t->args[i]);
    for (int i = 0; i < t->nerrors; i++) free(t->errors[i]);
    for (int i = 0; i < t->ncontains; i++) free(t->contains[i]);
    free(t->expect_json);
    free(t->xfail);
    memset(t, 0, sizeof *t);
}

static int starts(const char *s, const char *p) { return !strncmp(s, p, strlen(p)); }

static void run_file(const char *dir, const char *file, int have_cuda) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    char *text = read_file(path);
    if (!text) {
        printf("FAIL  %s: cannot read\n", file);
        nfail++;
        return;
    }
    test t;
    memset(&t, 0, sizeof t);
    int have = 0, lineno = 0;
    char *file_xfail = NULL, *next_xfail = NULL;
    double rtol = 1e-5, atol = 1e-6;
    for (char *line = text, *next; line; line = next) { /* (strtok would skip blank lines) */
        next = strchr(line, '\n');
        if (next) *next++ = '\0';
        lineno++;
        char *l = trim(line);
        if (!starts(l, "//")) continue;
        l = trim(l + 2);
        if (starts(l, "TEST:") || starts(l, "TEST(cpu):")) {
            if (have) run_test(dir, file, &t, have_cuda), free_test(&t);
            have = 1;
            t.line = lineno;
            t.cpu_only = starts(l, "TEST(cpu):");
            t.expect_exit = -1;
            t.rtol = rtol;
            t.atol = atol;
            rtol = 1e-5, atol = 1e-6;
            const char *xf = next_xfail ? next_xfail : file_xfail;
            t.xfail = xf ? strdup(xf) : NULL;
            free(next_xfail);
            next_xfail = NULL;
            char *rest = trim(strchr(l, ':') + 1);
            size_t k = strcspn(rest, " \t");
            snprintf(t.kind, sizeof t.kind, "%.*s", (int)k, rest);
            t.nargs = split_args(rest + k, t.args, MAX_ARGS);
            if (strcmp(t.kind, "call") && strcmp(t.kind, "check") && strcmp(t.kind, "emit") &&
                strcmp(t.kind, "cli")) {
                printf("FAIL  %s:%d: unknown test kind '%s'\n", file, lineno, t.kind);
                nfail++;
                have = 0;
                free_test(&t);
            }
        } else if (starts(l, "EXPECT:") && have) {
            free(t.expect_json);
            t.expect_json = subst(trim(l + 7));
        } else if ((starts(l, "EXPECT-ERROR:") || starts(l, "EXPECT-CONTAINS:")) && have) {
            int err = starts(l, "EXPECT-ERROR:");
            int *n = err ? &t.nerrors : &t.ncontains;
            if (*n < MAX_EXPECT) { /* (past the limit: a failure, never an expectation dropped unchecked) */
                (err ? t.errors : t.contains)[(*n)++] = subst(trim(l + (err ? 13 : 16)));
            } else {
                printf("FAIL  %s:%d: more than %d %s lines in one test\n", file, lineno, MAX_EXPECT,
                       err ? "EXPECT-ERROR" : "EXPECT-CONTAINS");
                nfail++;
            }
        } else if (starts(l, "EXPECT-EXIT:") && have) {
            t.expect_exit = atoi(l + 12);
        } else if (starts(l, "TOL:")) {
            sscanf(l + 4, "%lf %lf", &rtol, &atol);
        } else if (starts(l, "XFAIL-FILE:")) {
            free(file_xfail);
            file_xfail = strdup(trim(l + 11));
        } else if (starts(l, "XFAIL:")) {
            free(next_xfail);
            next_xfail = strdup(trim(l + 6));
        }
    }
    if (have) run_test(dir, file, &t, have_cuda), free_test(&t);
    free(file_xfail);
    free(next_xfail);
    free(text);
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: lang_runner NABLA_BINARY TEST_DIR [NAME_FILTER]\n");
        return 2;
    }
    static char abs_bin[4096];
    if (!realpath(argv[1], abs_bin)) {
        fprintf(stderr, "lang_runner: %s: %s\n", argv[1], strerror(errno));
        return 2;
    }
    nabla_bin = abs_bin;
    const char *dir = argv[2], *filter = argc > 3 ? argv[3] : NULL;
    snprintf(scratch, sizeof scratch, "/tmp/nb_lang_tests_%ld", (long)getpid());
    mkdir(scratch, 0700);
    const char *devs = getenv("NB_LANG_DEVICES");
    int have_cuda = devs ? strstr(devs, "cuda") != NULL : nb_cuda_device_count() > 0;
    const char *req = getenv("NB_REQUIRE_CUDA");
    if (req && req[0] && strcmp(req, "0") && !have_cuda) {
        fprintf(stderr, "lang_runner: NB_REQUIRE_CUDA is set but there is no GPU\n");
        return 1;
    }
    DIR *dp = opendir(dir);
    if (!dp) {
        fprintf(stderr, "lang_runner: %s: %s\n", dir, strerror(errno));
        return 2;
    }
    char *names[1024];
    int n = 0;
    struct dirent *de;
    while ((de = readdir(dp)) && n < 1024) {
        size_t l = strlen(de->d_name);
        int test_file = (l > 3 && !strcmp(de->d_name + l - 3, ".nb")) || (l > 6 && !strcmp(de->d_name + l - 6, ".slang"));
        if (test_file && (!filter || strstr(de->d_name, filter)))
            names[n++] = strdup(de->d_name);
    }
    closedir(dp);
    qsort(names, (size_t)n, sizeof names[0], cmp_str);
    for (int i = 0; i < n; i++) {
        run_file(dir, names[i], have_cuda);
        free(names[i]);
    }
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf %s", scratch);
    if (system(cmd) != 0) fprintf(stderr, "lang_runner: could not remove %s\n", scratch);
    printf("%d passed, %d failed, %d expected failures, %d unexpected passes (%s)\n", npass, nfail,
           nxfail, nxpass, have_cuda ? "cpu + cuda" : "cpu only");
    return nfail ? 1 : 0;
}
