/* The hand-written CUDA kernel files (src/jit/cuda_files.h):
 *   - the embedded table (src/jit/cuda_files_data.c) holds exactly the kernels/ files of src/,
 *     each byte for byte (else: rerun python3 tools/embed_cu.py);
 *   - every embedded .cu compiles with NVRTC for sm_90, once per `//! nvrtc-check: DEFINES` line
 *     of the file (once without defines if it has none), so CI catches a broken kernel file
 *     without a GPU (skipped only when NVRTC is missing);
 *   - includes: beside the includer and from src/, nested, shared by two files; a missing or an
 *     ambiguous include, an unknown file and a bad define are clear errors;
 *   - NVRTC errors name the real file and line, in the .cu and in a header;
 *   - with a GPU: a kernel loaded through nb_jit_cuda_kernel runs. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "device/cuda/cuda_api.h" /* nb_nvrtc_compile_headers: compiles without a GPU */
#include "jit/cuda_files.h"
#include "nabla/alloc.h"
#include "nabla/file.h"
#include "nb_test.h"

/* The checkout this test was built from: __FILE__ less "/tests/test_cuda_files.c". */
static const char *repo_root(void) {
    static char root[1024];
    snprintf(root, sizeof root, "%s", __FILE__);
    for (int cut = 0; cut < 2; cut++) {
        char *slash = strrchr(root, '/');
        if (slash) *slash = 0;
        else snprintf(root, sizeof root, "..");
    }
    return root;
}

static char *read_file(const char *path, size_t *len) {
    char *s = NULL;
    return nb_file_read_all(path, "kernel file", (size_t)1 << 24, &s, len) == NB_OK ? s : NULL;
}

static int ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && !strcmp(s + a - b, suffix);
}

/* Walks dir (a path under the root, e.g. "src"); every .cu/.cuh directly inside a folder named
 * kernels must be in the table with the same text. Counts them into *n. */
static void check_tree(const char *rel, int *n) {
    char abs[2048];
    snprintf(abs, sizeof abs, "%s/%s", repo_root(), rel);
    DIR *d = opendir(abs);
    if (!d) return;
    const char *base = strrchr(rel, '/');
    int in_kernels = !strcmp(base ? base + 1 : rel, "kernels");
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char sub[1024], full[2048];
        snprintf(sub, sizeof sub, "%s/%s", rel, e->d_name);
        snprintf(full, sizeof full, "%s/%s", repo_root(), sub);
        struct stat st;
        if (stat(full, &st) != 0) continue;
        if (S_ISDIR(st.st_mode)) {
            check_tree(sub, n);
        } else if (in_kernels && (ends_with(sub, ".cu") || ends_with(sub, ".cuh"))) {
            (*n)++;
            const char *emb = nb_cuda_file_text(sub);
            size_t len = 0;
            char *text = read_file(full, &len);
            if (!emb)
                fprintf(stderr, "  %s is not embedded: run python3 tools/embed_cu.py\n", sub);
            else if (text && strcmp(text, emb))
                fprintf(stderr, "  %s differs from its embedded copy: run python3 tools/embed_cu.py\n", sub);
            NB_EXPECT(emb && text && !strcmp(text, emb));
            if (text) nb_free(text, len + 1);
        }
    }
    closedir(d);
}

static void test_table_matches_files(void) {
    int on_disk = 0, in_table = 0;
    check_tree("src", &on_disk);
    for (const nb_cuda_file *f = nb_cuda_files; f->path; f++) {
        in_table++;
        char full[2048];
        snprintf(full, sizeof full, "%s/%s", repo_root(), f->path);
        struct stat st;
        if (stat(full, &st) != 0)
            fprintf(stderr, "  %s is embedded but gone: run python3 tools/embed_cu.py\n", f->path);
        NB_EXPECT(stat(full, &st) == 0);
    }
    NB_EXPECT(on_disk == in_table);
}

/* Compiles p for sm_90; on a compile error appends the rewritten log to *log (if given). */
static nb_status compile(const nb_cuda_program *p, nb_strbuf *log) {
    void *img = NULL;
    size_t size = 0;
    nb_status s = nb_nvrtc_compile_headers(p->source, p->path, "sm_90", p->opts, &p->headers, &img, &size, NULL);
    if (s == NB_OK) nb_free(img, size);
    if (s == NB_ERR_COMPILE && log) nb_cuda_log_rewrite(p, nb_last_error(), log);
    return s;
}

/* Splits "A=1 B C=x" into defs (pointers into buf). */
static void split_defines(char *buf, const char *defs[NB_CUDA_MAX_DEFINES + 1]) {
    int n = 0;
    for (char *t = strtok(buf, " \t"); t && n < NB_CUDA_MAX_DEFINES; t = strtok(NULL, " \t")) defs[n++] = t;
    defs[n] = NULL;
}

static void test_every_kernel_compiles(void) {
    if (!nb_nvrtc_version()) NB_SKIP("NVRTC not available");
    int compiled = 0;
    for (const nb_cuda_file *f = nb_cuda_files; f->path; f++) {
        if (!ends_with(f->path, ".cu")) continue;
        int configs = 0;
        const char *s = f->text;
        for (;;) {
            const char *m = strstr(s, "//! nvrtc-check:");
            char buf[1024] = "";
            if (m) {
                const char *b = m + strlen("//! nvrtc-check:"), *e = strchr(b, '\n');
                size_t len = e ? (size_t)(e - b) : strlen(b);
                snprintf(buf, sizeof buf, "%.*s", (int)len, b);
                s = b + len;
            } else if (configs > 0) {
                break;
            }
            const char *defs[NB_CUDA_MAX_DEFINES + 1];
            split_defines(buf, defs);
            nb_cuda_program p;
            nb_status st = nb_cuda_program_prepare(NULL, f->path, defs, &p);
            nb_strbuf log;
            nb_strbuf_init(&log);
            if (st == NB_OK) st = compile(&p, &log);
            if (st != NB_OK)
                fprintf(stderr, "  %s [%s]: %s\n%s\n", f->path, buf, nb_status_name(st),
                        nb_strbuf_cstr(&log)[0] ? nb_strbuf_cstr(&log) : nb_last_error());
            NB_EXPECT(st == NB_OK);
            nb_strbuf_free(&log);
            configs++;
            compiled++;
            if (!m) break;
        }
    }
    printf("  %d kernel configurations compiled\n", compiled);
}

/* A small table of its own: includes beside the includer, from src/, nested, and errors. */
static const nb_cuda_file g_table[] = {
    {"src/a/kernels/main.cu",
     "#include \"common.cuh\"\n"
     "#include \"b/kernels/util.cuh\"\n"
     "extern \"C\" __global__ void k_main(float *x) { x[threadIdx.x] = twice(x[threadIdx.x]) + W; }\n"},
    {"src/a/kernels/second.cu", "#include \"common.cuh\"\n#include \"inner.cuh\"\n"},
    {"src/a/kernels/common.cuh", "#pragma once\n#include \"b/kernels/util.cuh\"\n"},
    {"src/a/kernels/inner.cuh", "#pragma once\n__device__ float other(float x) { return x; }\n"},
    {"src/b/kernels/util.cuh", "#pragma once\n#include \"inner.cuh\"\n__device__ float twice(float x) { return inner(x) * 2.f; }\n"},
    {"src/b/kernels/inner.cuh", "#pragma once\n__device__ float inner(float x) { return x; }\n"},
    {"src/a/kernels/bad.cu", "// a comment\n\n__device__ float f(float x) { return x + nosuch; }\n"},
    {"src/a/kernels/badh.cu", "#include \"broken.cuh\"\n__device__ float g(float x) { return h(x); }\n"},
    {"src/a/kernels/broken.cuh", "#pragma once\n__device__ float h(float x) { return x +; }\n"},
    {"src/a/kernels/missing.cu", "// first\n  #  include \"nope.cuh\"\n"},
    {NULL, NULL},
};

static void test_includes(void) {
    nb_cuda_program p;
    const char *defs[] = {"W=3", NULL};
    NB_REQUIRE_OK(nb_cuda_program_prepare(g_table, "src/a/kernels/main.cu", defs, &p));
    NB_EXPECT(!strcmp(p.path, "src/a/kernels/main.cu"));
    /* common.cuh (beside), b/kernels/util.cuh (from src/), inner.cuh (beside util.cuh) */
    NB_EXPECT(p.n_headers == 3 && p.headers.n == 3);
    int found = 0;
    for (int i = 0; i < p.n_headers; i++) {
        if (!strcmp(p.names[i], "common.cuh")) found += !strcmp(p.paths[i], "src/a/kernels/common.cuh");
        if (!strcmp(p.names[i], "b/kernels/util.cuh")) found += !strcmp(p.paths[i], "src/b/kernels/util.cuh");
        if (!strcmp(p.names[i], "inner.cuh")) found += !strcmp(p.paths[i], "src/b/kernels/inner.cuh");
    }
    NB_EXPECT(found == 3);
    NB_EXPECT(p.opts[0] && !strcmp(p.opts[0], "-DW=3") && !p.opts[1]);
    if (nb_nvrtc_version()) NB_EXPECT_OK(compile(&p, NULL));

    /* "inner.cuh" means src/a/kernels/inner.cuh in second.cu, src/b/kernels/inner.cuh in util.cuh */
    NB_EXPECT_ERR(nb_cuda_program_prepare(g_table, "src/a/kernels/second.cu", NULL, &p), NB_ERR_COMPILE,
                  "src/b/kernels/util.cuh:2: error: \"inner.cuh\" means src/b/kernels/inner.cuh here but "
                  "src/a/kernels/inner.cuh elsewhere");
    NB_EXPECT_ERR(nb_cuda_program_prepare(g_table, "src/a/kernels/missing.cu", NULL, &p), NB_ERR_COMPILE,
                  "src/a/kernels/missing.cu:2: error: cannot include \"nope.cuh\"");
    NB_EXPECT_ERR(nb_cuda_program_prepare(g_table, "src/a/kernels/nosuch.cu", NULL, &p), NB_ERR_NOT_FOUND,
                  "src/a/kernels/nosuch.cu");
    const char *bad1[] = {"1X=2", NULL}, *bad2[] = {"X=1\n#define Y", NULL}, *bad3[] = {"", NULL};
    NB_EXPECT_ERR(nb_cuda_program_prepare(g_table, "src/a/kernels/main.cu", bad1, &p), NB_ERR_INVALID_ARG,
                  "bad define '1X=2'");
    NB_EXPECT_ERR(nb_cuda_program_prepare(g_table, "src/a/kernels/main.cu", bad2, &p), NB_ERR_INVALID_ARG,
                  "bad define");
    NB_EXPECT_ERR(nb_cuda_program_prepare(g_table, "src/a/kernels/main.cu", bad3, &p), NB_ERR_INVALID_ARG,
                  "bad define");
    { /* long defines (a level table as a list) fit; past the limits: typed errors */
        static char big[NB_CUDA_DEFINE_CHARS / 2], many[NB_CUDA_MAX_DEFINES + 1][8];
        const char *dl[NB_CUDA_MAX_DEFINES + 2];
        int n = snprintf(big, sizeof big, "TAB=0");
        for (int i = 1; n < 900; i++) n += snprintf(big + n, sizeof big - (size_t)n, ",%d", 1000000 + i);
        dl[0] = big, dl[1] = NULL;
        NB_EXPECT_OK(nb_cuda_program_prepare(g_table, "src/a/kernels/main.cu", dl, &p));
        NB_EXPECT(p.opts[0] && !strncmp(p.opts[0], "-DTAB=0,1000001,", 16) && strlen(p.opts[0]) == strlen(big) + 2);
        memset(big + n, 'x', sizeof big - (size_t)n - 1);
        big[sizeof big - 1] = '\0';
        const char *two[] = {big, big, big, NULL};
        NB_EXPECT_ERR(nb_cuda_program_prepare(g_table, "src/a/kernels/main.cu", two, &p), NB_ERR_INVALID_ARG,
                      "the defines exceed");
        for (int i = 0; i <= NB_CUDA_MAX_DEFINES; i++) {
            snprintf(many[i], sizeof many[i], "D%d", i);
            dl[i] = many[i];
        }
        dl[NB_CUDA_MAX_DEFINES + 1] = NULL;
        NB_EXPECT_ERR(nb_cuda_program_prepare(g_table, "src/a/kernels/main.cu", dl, &p), NB_ERR_INVALID_ARG,
                      "more than");
    }
    /* the embedded table is the default */
    NB_EXPECT_ERR(nb_cuda_program_prepare(NULL, "src/a/kernels/main.cu", NULL, &p), NB_ERR_NOT_FOUND,
                  "tools/embed_cu.py");
}

/* Compiles `path` of g_table, which must fail with `want` in the rewritten log. */
static void expect_log(const char *path, const char *want) {
    nb_cuda_program p;
    nb_strbuf log;
    nb_strbuf_init(&log);
    NB_EXPECT_OK(nb_cuda_program_prepare(g_table, path, NULL, &p));
    NB_EXPECT(compile(&p, &log) == NB_ERR_COMPILE);
    if (!strstr(nb_strbuf_cstr(&log), want)) fprintf(stderr, "  log of %s: %s\n", path, nb_strbuf_cstr(&log));
    NB_EXPECT(strstr(nb_strbuf_cstr(&log), want) != NULL);
    nb_strbuf_free(&log);
}

static void test_errors_name_file_and_line(void) {
    if (!nb_nvrtc_version()) NB_SKIP("NVRTC not available");
    expect_log("src/a/kernels/bad.cu", "src/a/kernels/bad.cu:3: error: identifier \"nosuch\" is undefined");
    expect_log("src/a/kernels/badh.cu", "src/a/kernels/broken.cuh:2: error");
}

static void test_loader_errors(void) {
    nb_device *cpu = NULL;
    NB_REQUIRE_OK(nb_device_open("cpu", &cpu));
    nb_jit_kernel *k = (nb_jit_kernel *)1;
    NB_EXPECT_ERR(nb_jit_cuda_kernel(cpu, "src/x/kernels/y.cu", NULL, "e", &k), NB_ERR_INVALID_ARG,
                  "needs a CUDA device");
    NB_EXPECT(k == NULL);
    nb_device_close(cpu);
}

/* With a GPU: the first embedded .cu without defines loads through the one loader. */
static void test_loader_cuda(void) {
    nb_device *dev = NULL;
    if (nb_device_open("cuda", &dev) != NB_OK) NB_SKIP("no CUDA device");
    nb_jit_kernel *k = NULL;
    NB_EXPECT_ERR(nb_jit_cuda_kernel(dev, "src/nn/kernels/none.cu", NULL, "e", &k), NB_ERR_NOT_FOUND,
                  "no embedded CUDA kernel file");
    int tried = 0;
    for (const nb_cuda_file *f = nb_cuda_files; f->path && !tried; f++) {
        if (!ends_with(f->path, ".cu") || strstr(f->text, "//! nvrtc-check:")) continue;
        /* the first entry written out, not one inside a macro (#define ENTRY(name) extern "C" ...) */
        const char *e = f->text;
        while ((e = strstr(e, "extern \"C\" __global__ void ")) != NULL) {
            const char *start = e; /* the line's first character */
            while (start > f->text && start[-1] != '\n') start--;
            const char *line = start;
            while (*line == ' ') line++;
            /* a #define line, or a line continuing one (the line before ends in a backslash) */
            int in_macro = !strncmp(line, "#define", 7) || (start - f->text >= 2 && start[-2] == '\\');
            if (!in_macro) break;
            e++;
        }
        if (!e) continue;
        e += strlen("extern \"C\" __global__ void ");
        char entry[128];
        size_t n = strcspn(e, "( \n");
        snprintf(entry, sizeof entry, "%.*s", (int)n, e);
        NB_EXPECT_OK(nb_jit_cuda_kernel(dev, f->path, NULL, entry, &k));
        NB_EXPECT(k && nb_jit_kernel_cuda_fn(k) != NULL);
        tried = 1;
    }
    nb_device_close(dev);
}

int main(int argc, char **argv) {
    NB_TEST_MAIN(argc, argv, test_table_matches_files, test_every_kernel_compiles, test_includes,
                 test_errors_name_file_and_line, test_loader_errors, test_loader_cuda);
}
