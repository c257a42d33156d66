/* The JIT layer: compile, memory and disk cache hits, keys, corrupt entries, concurrent processes,
 * compile errors, unusable cache directories, listing/clearing; the CUDA path where there is a GPU.
 *
 * Every run uses a fresh cache directory (with a space in its path) under $TMPDIR and deletes it
 * at exit. `test_jit --child-reuse TOKEN` is the second process of test_second_process_reuses. */
#define _GNU_SOURCE /* nftw's FTW_PHYS */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <pthread.h>
#include <stdint.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "jit/jit.h"
#include "nabla/env.h"
#include "nb_test.h"

static char g_root[1024];  /* the run's temp dir, removed at exit */
static char g_cache[1100]; /* NABLA_CACHE_DIR for the tests */
static char g_self[1024];  /* this executable, for the second process */

/* ---- helpers ------------------------------------------------------------------------------- */

static const char *SRC_FMT =
    "#include <stdint.h>\n"
    "typedef struct { double *out; const double *in; double scale; } P;\n"
    "#ifndef EXTRA\n#define EXTRA 0\n#endif\n"
    "void %s(const void *params, int64_t begin, int64_t end) {\n"
    "    const P *p = (const P *)params;\n"
    "    for (int64_t i = begin; i < end; i++) p->out[i] = p->in[i] * p->scale + %d + EXTRA;\n"
    "}\n";

typedef struct scale_params {
    double *out;
    const double *in;
    double scale;
} scale_params;

static void make_src(char *buf, size_t cap, const char *entry, int token) {
    snprintf(buf, cap, SRC_FMT, entry, token);
}

/* Runs k over n indices and checks out[i] == in[i] * 2 + add. Returns 1 if all match. */
static int run_check(nb_jit_kernel *k, int64_t n, double add) {
    double *in = malloc(sizeof(double) * (size_t)n), *out = malloc(sizeof(double) * (size_t)n);
    if (!in || !out) return free(in), free(out), 0;
    for (int64_t i = 0; i < n; i++) in[i] = (double)i * 0.5, out[i] = -1;
    scale_params p = {out, in, 2.0};
    int ok = nb_jit_launch_cpu(k, &p, n) == NB_OK;
    for (int64_t i = 0; ok && i < n; i++) ok = out[i] == in[i] * 2.0 + add;
    free(in);
    free(out);
    return ok;
}

static nb_jit_stats_t stats(void) {
    nb_jit_stats_t s;
    nb_jit_stats(&s);
    return s;
}

static void fresh(void) { /* no in-process kernels, zero counters, the default cache dir */
    nb_jit_forget_all();
    nb_jit_stats_reset();
    setenv("NABLA_CACHE_DIR", g_cache, 1);
    nb_env_reload();
}

static void entry_path(char *buf, size_t cap, const char *key, const char *ext) {
    snprintf(buf, cap, "%s/%s.%s", g_cache, key, ext);
}

static int exists(const char *path) { return access(path, F_OK) == 0; }

static int rm_one(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb, (void)flag, (void)ftw;
    return remove(p);
}
static void rm_rf(const char *path) { nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS); }
static void cleanup(void) {
    nb_jit_forget_all();
    if (g_root[0]) rm_rf(g_root);
}

/* Records warnings so that expected ones can be checked and do not clutter the output. */
static char g_warn[8192];
static void warn_sink(nb_log_level lv, const char *msg, void *user) {
    (void)user;
    if (lv >= NB_LOG_WARN && strlen(g_warn) + strlen(msg) + 2 < sizeof g_warn) {
        strcat(g_warn, msg);
        strcat(g_warn, "\n");
    }
}
static void capture_warnings(void) {
    g_warn[0] = '\0';
    nb_log_set_sink(warn_sink, NULL);
}

/* ---- CPU tests ------------------------------------------------------------------------------ */

static void test_compile_and_run(void) {
    fresh();
    char src[2048];
    make_src(src, sizeof src, "k_run", 1);
    nb_jit_kernel *k = NULL;
    NB_REQUIRE_OK(nb_jit_load(NULL, src, "k_run", NULL, &k));
    nb_jit_stats_t s = stats();
    NB_EXPECT(s.compiles == 1 && s.disk_hits == 0 && s.memory_hits == 0);
    NB_EXPECT(nb_jit_kernel_kind(k) == NB_DEVICE_CPU);
    NB_EXPECT(nb_jit_kernel_cpu_fn(k) != NULL && nb_jit_kernel_cuda_fn(k) == NULL);
    NB_EXPECT(strlen(nb_jit_kernel_key(k)) == 32);
    NB_EXPECT(run_check(k, 10, 1));       /* inline */
    NB_EXPECT(run_check(k, 300001, 1));   /* on the pool, uneven chunks */
    NB_EXPECT(nb_jit_launch_cpu(k, NULL, 0) == NB_OK);
    NB_EXPECT_ERR(nb_jit_launch_cpu(k, NULL, -1), NB_ERR_INVALID_ARG, "< 0");
    NB_EXPECT_ERR(nb_jit_launch_cuda(k, &k, sizeof k, 1, NULL), NB_ERR_INVALID_ARG, "not a CUDA");
    char path[1300];
    entry_path(path, sizeof path, nb_jit_kernel_key(k), "so");
    NB_EXPECT(exists(path));
    entry_path(path, sizeof path, nb_jit_kernel_key(k), "c");
    NB_EXPECT(exists(path));
    /* Same kernel through an explicit CPU device handle: the same in-process entry. */
    nb_device *cpu = NULL;
    NB_REQUIRE_OK(nb_device_open("cpu", &cpu));
    nb_jit_kernel *k2 = NULL;
    NB_EXPECT_OK(nb_jit_load(cpu, src, "k_run", NULL, &k2));
    NB_EXPECT(k2 == k);
    nb_device_close(cpu);
    NB_EXPECT_ERR(nb_jit_load(NULL, src, "", NULL, &k2), NB_ERR_INVALID_ARG, "entry");
    NB_EXPECT_ERR(nb_jit_load(NULL, NULL, "k_run", NULL, &k2), NB_ERR_INVALID_ARG, "source");
}

static void test_memory_hit_is_cheap(void) {
    fresh();
    /* An emitted kernel is a few KiB: pad the source to ~8 KiB. */
    char src[9000];
    make_src(src, sizeof src, "k_mem", 2);
    size_t len = strlen(src);
    while (len + 80 < sizeof src - 1) len += (size_t)sprintf(src + len, "/* padding padding padding padding padding padding padding padding */\n");
    nb_jit_kernel *k = NULL, *k2 = NULL;
    NB_REQUIRE_OK(nb_jit_load(NULL, src, "k_mem", NULL, &k));
    NB_REQUIRE_OK(nb_jit_load(NULL, src, "k_mem", NULL, &k2));
    NB_EXPECT(k == k2);
    nb_jit_stats_t s = stats();
    NB_EXPECT(s.compiles == 1 && s.memory_hits == 1 && s.disk_hits == 0);
    const int iters = 20000;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 0; i < iters; i++) nb_jit_load(NULL, src, "k_mem", NULL, &k2);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double us = ((double)(t1.tv_sec - t0.tv_sec) * 1e9 + (double)(t1.tv_nsec - t0.tv_nsec)) / iters / 1e3;
    printf("  warm nb_jit_load of a %zu-byte source: %.3f us\n", strlen(src), us);
#if !defined(__SANITIZE_ADDRESS__) && defined(__OPTIMIZE__) /* sanitized -O0: ~50 us, no bound */
    /* ~1-2 us idle; a disk lookup or a compile costs 100 us and more. The bound leaves room for a
     * loaded CI machine (it measured 5.5 us with 6 builds beside it). */
    NB_EXPECT(us < 50.0);
#endif
    NB_EXPECT(stats().memory_hits == 1 + (uint64_t)iters);
}

static void test_disk_hit_after_forget(void) {
    fresh();
    char src[2048];
    make_src(src, sizeof src, "k_disk", 3);
    nb_jit_kernel *k = NULL;
    NB_REQUIRE_OK(nb_jit_load(NULL, src, "k_disk", NULL, &k));
    char key[33];
    snprintf(key, sizeof key, "%s", nb_jit_kernel_key(k));
    nb_jit_forget_all();
    nb_jit_stats_reset();
    NB_REQUIRE_OK(nb_jit_load(NULL, src, "k_disk", NULL, &k));
    nb_jit_stats_t s = stats();
    NB_EXPECT(s.compiles == 0 && s.disk_hits == 1 && s.corrupt_entries == 0);
    NB_EXPECT(!strcmp(key, nb_jit_kernel_key(k)));
    NB_EXPECT(run_check(k, 5000, 3));
}

static void test_key_changes(void) {
    fresh();
    char a[2048], b[2048];
    make_src(a, sizeof a, "k_key", 4);
    make_src(b, sizeof b, "k_key", 5); /* one character differs */
    nb_jit_kernel *ka, *kb, *kc, *kd;
    NB_REQUIRE_OK(nb_jit_load(NULL, a, "k_key", NULL, &ka));
    NB_REQUIRE_OK(nb_jit_load(NULL, b, "k_key", NULL, &kb));
    NB_EXPECT(stats().compiles == 2);
    NB_EXPECT(strcmp(nb_jit_kernel_key(ka), nb_jit_kernel_key(kb)) != 0);
    NB_EXPECT(run_check(kb, 100, 5));
    /* Changed flags: another key, and the flag takes effect. */
    const char *flags[] = {"-DEXTRA=10", NULL};
    nb_jit_options o = {.name = "key-test", .cflags = flags};
    NB_REQUIRE_OK(nb_jit_load(NULL, a, "k_key", &o, &kc));
    NB_EXPECT(stats().compiles == 3);
    NB_EXPECT(kc != ka && strcmp(nb_jit_kernel_key(ka), nb_jit_kernel_key(kc)) != 0);
    NB_EXPECT(run_check(kc, 100, 14));
    /* $NABLA_CFLAGS is part of the key too (read once per process: forget to reread it). */
    setenv("NABLA_CFLAGS", "-DEXTRA=20", 1);
    nb_env_reload();
    nb_jit_forget_all();
    NB_REQUIRE_OK(nb_jit_load(NULL, a, "k_key", NULL, &kd));
    unsetenv("NABLA_CFLAGS");
    nb_env_reload();
    NB_EXPECT(stats().compiles == 4);
    NB_EXPECT(run_check(kd, 100, 24));
    nb_jit_forget_all();
    /* A second entry in the same source: same artifact, so a disk hit, not a compile. */
    char two[4096];
    make_src(two, sizeof two, "k_first", 6);
    size_t n = strlen(two);
    snprintf(two + n, sizeof two - n, "void k_second(const void *p, int64_t b, int64_t e) "
                                      "{ k_first(p, b, e); }\n");
    nb_jit_stats_reset();
    NB_REQUIRE_OK(nb_jit_load(NULL, two, "k_first", NULL, &ka));
    NB_REQUIRE_OK(nb_jit_load(NULL, two, "k_second", NULL, &kb));
    nb_jit_stats_t s = stats();
    NB_EXPECT(ka != kb && s.compiles == 1 && s.disk_hits == 1);
    NB_EXPECT(!strcmp(nb_jit_kernel_key(ka), nb_jit_kernel_key(kb)));
    NB_EXPECT(run_check(kb, 100, 6));
}

/* Damages the entry of `src` in one of several ways and checks that it is rebuilt. */
static void corrupt_and_reload(const char *src, const char *entry, int how, double add) {
    nb_jit_forget_all();
    nb_jit_kernel *k;
    NB_REQUIRE_OK(nb_jit_load(NULL, src, entry, NULL, &k));
    char path[1300];
    entry_path(path, sizeof path, nb_jit_kernel_key(k), "so");
    nb_jit_forget_all(); /* dlclose before touching the file */
    struct stat sb;
    NB_REQUIRE_OK(stat(path, &sb) == 0 ? NB_OK : NB_ERR_IO);
    if (how == 0) { /* truncated to half */
        NB_EXPECT(truncate(path, sb.st_size / 2) == 0);
    } else if (how == 1) { /* bytes overwritten in the middle, size unchanged */
        int fd = open(path, O_WRONLY);
        NB_EXPECT(fd >= 0 && pwrite(fd, "garbage!", 8, sb.st_size / 3) == 8);
        if (fd >= 0) close(fd);
    } else if (how == 2) { /* emptied */
        NB_EXPECT(truncate(path, 0) == 0);
    } else { /* the last byte (trailer checksum) flipped */
        int fd = open(path, O_RDWR);
        unsigned char c = 0;
        NB_EXPECT(fd >= 0 && pread(fd, &c, 1, sb.st_size - 1) == 1);
        c ^= 0x5a;
        NB_EXPECT(fd >= 0 && pwrite(fd, &c, 1, sb.st_size - 1) == 1);
        if (fd >= 0) close(fd);
    }
    nb_jit_stats_reset();
    capture_warnings();
    nb_status st = nb_jit_load(NULL, src, entry, NULL, &k);
    nb_log_set_sink(NULL, NULL);
    NB_REQUIRE_OK(st);
    nb_jit_stats_t s = stats();
    NB_EXPECT(s.corrupt_entries == 1 && s.compiles == 1 && s.disk_hits == 0);
    NB_EXPECT(strstr(g_warn, "corrupt") != NULL);
    NB_EXPECT(run_check(k, 1000, add));
    /* The rebuilt entry is good: a disk hit next time. */
    nb_jit_forget_all();
    nb_jit_stats_reset();
    NB_REQUIRE_OK(nb_jit_load(NULL, src, entry, NULL, &k));
    s = stats();
    NB_EXPECT(s.disk_hits == 1 && s.compiles == 0 && s.corrupt_entries == 0);
}

static void test_corrupt_entry_rebuilt(void) {
    fresh();
    char src[2048];
    make_src(src, sizeof src, "k_corrupt", 7);
    for (int how = 0; how < 4; how++) corrupt_and_reload(src, "k_corrupt", how, 7);
    /* An artifact missing while its source is there is a plain miss. */
    nb_jit_kernel *k;
    NB_REQUIRE_OK(nb_jit_load(NULL, src, "k_corrupt", NULL, &k));
    char path[1300];
    entry_path(path, sizeof path, nb_jit_kernel_key(k), "so");
    nb_jit_forget_all();
    unlink(path);
    nb_jit_stats_reset();
    NB_REQUIRE_OK(nb_jit_load(NULL, src, "k_corrupt", NULL, &k));
    NB_EXPECT(stats().compiles == 1 && stats().corrupt_entries == 0);
}

static void test_two_processes_compile_concurrently(void) {
    fresh();
    char src[2048];
    make_src(src, sizeof src, "k_race", 8);
    int gate[2];
    NB_REQUIRE_OK(pipe(gate) == 0 ? NB_OK : NB_ERR_IO);
    pid_t kids[2];
    for (int i = 0; i < 2; i++) {
        kids[i] = fork();
        if (kids[i] == 0) { /* child: wait for the gate, compile, run inline, report */
            char c;
            close(gate[1]);
            if (read(gate[0], &c, 1) < 0) _exit(20);
            nb_jit_kernel *k;
            if (nb_jit_load(NULL, src, "k_race", NULL, &k) != NB_OK) _exit(21);
            nb_jit_stats_t s = stats();
            if (s.compiles + s.disk_hits != 1) _exit(22);
            _exit(run_check(k, 100, 8) ? 0 : 23); /* n <= grain: no pool in a forked child */
        }
    }
    close(gate[0]);
    close(gate[1]); /* both start now */
    for (int i = 0; i < 2; i++) {
        int status = -1;
        NB_EXPECT(kids[i] > 0 && waitpid(kids[i], &status, 0) == kids[i]);
        NB_EXPECT(WIFEXITED(status) && WEXITSTATUS(status) == 0);
        if (!WIFEXITED(status) || WEXITSTATUS(status)) fprintf(stderr, "  child %d: status %d\n", i, status);
    }
    /* The entry left behind is complete and valid. */
    nb_jit_kernel *k;
    NB_REQUIRE_OK(nb_jit_load(NULL, src, "k_race", NULL, &k));
    nb_jit_stats_t s = stats();
    NB_EXPECT(s.disk_hits == 1 && s.compiles == 0 && s.corrupt_entries == 0);
    NB_EXPECT(run_check(k, 100000, 8));
}

/* The second process: loads the kernel compiled by the parent; the exit code says how it went. */
static int child_reuse(const char *token) {
    char src[2048];
    make_src(src, sizeof src, "k_reuse", atoi(token));
    nb_jit_kernel *k;
    if (nb_jit_load(NULL, src, "k_reuse", NULL, &k) != NB_OK) {
        fprintf(stderr, "child: %s\n", nb_last_error());
        return 10;
    }
    nb_jit_stats_t s = stats();
    if (s.compiles != 0) return 11;
    if (s.disk_hits != 1) return 12;
    if (!run_check(k, 100000, atoi(token))) return 13;
    nb_jit_forget_all();
    return 0;
}

/* Runs this executable again as `test_jit MODE TOKEN` (a clean process: no threads, no state). */
static pid_t spawn_self(const char *mode, int token) {
    pid_t pid = fork();
    if (pid == 0) {
        char tok[32];
        snprintf(tok, sizeof tok, "%d", token);
        char *argv[] = {g_self, (char *)mode, tok, NULL};
        execv(g_self, argv);
        _exit(127);
    }
    return pid;
}

/* Compiles (or finds) the test kernel `entry` with constant `token` in this process. */
static nb_status load_token(const char *entry, int token, nb_jit_kernel **k) {
    char src[2048];
    make_src(src, sizeof src, entry, token);
    return nb_jit_load(NULL, src, entry, NULL, k);
}

static void test_second_process_reuses(void) {
    fresh();
    nb_jit_kernel *k;
    NB_REQUIRE_OK(load_token("k_reuse", 9, &k));
    pid_t pid = spawn_self("--child-reuse", 9);
    int status = -1;
    NB_EXPECT(pid > 0 && waitpid(pid, &status, 0) == pid);
    NB_EXPECT(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status))
        fprintf(stderr, "  second process: status %d (exit %d)\n", status, WEXITSTATUS(status));
}

static int count_temp_files(void) {
    int n = 0;
    DIR *d = opendir(g_cache);
    for (struct dirent *e; d && (e = readdir(d));) n += !strncmp(e->d_name, ".tmp-", 5);
    if (d) closedir(d);
    return n;
}

static void test_compile_error(void) {
    fresh();
    const char *bad = "#include <stdint.h>\n"
                      "void k_bad(const void *p, int64_t b, int64_t e) { undeclared_thing = 1; }\n";
    nb_jit_kernel *k = NULL;
    nb_jit_options o = {.name = "bad.nb:k_bad"};
    NB_EXPECT_ERR(nb_jit_load(NULL, bad, "k_bad", &o, &k), NB_ERR_COMPILE, "undeclared_thing");
    NB_EXPECT(strstr(nb_last_error(), "bad.nb:k_bad") != NULL);
    NB_EXPECT(strstr(nb_last_error(), "error") != NULL);
    NB_EXPECT(k == NULL);
    nb_jit_stats_t s = stats();
    NB_EXPECT(s.compile_errors == 1 && s.compiles == 0);
    NB_EXPECT(count_temp_files() == 0);
    /* Not memoised: the next try compiles (and fails) again. */
    NB_EXPECT_ERR(nb_jit_load(NULL, bad, "k_bad", &o, &k), NB_ERR_COMPILE, "undeclared_thing");
    NB_EXPECT(stats().compile_errors == 2);
    /* A missing entry point is NB_ERR_NOT_FOUND naming it. */
    char src[2048];
    make_src(src, sizeof src, "k_there", 10);
    NB_EXPECT_ERR(nb_jit_load(NULL, src, "k_not_there", NULL, &k), NB_ERR_NOT_FOUND, "k_not_there");
    NB_EXPECT_OK(nb_jit_load(NULL, src, "k_there", NULL, &k));
}

static void test_compiler_from_env(void) {
    fresh();
    char src[2048];
    make_src(src, sizeof src, "k_cc", 11);
    nb_jit_kernel *k;
    setenv("CC", "/nonexistent/bin/cc", 1);
    nb_env_reload();
    nb_jit_forget_all();
    NB_EXPECT_ERR(nb_jit_load(NULL, src, "k_cc", NULL, &k), NB_ERR_UNSUPPORTED, "/nonexistent/bin/cc");
    /* $CC may carry arguments; they are part of the compiler's identity (the key). */
    setenv("CC", "cc -DEXTRA=100", 1);
    nb_env_reload();
    nb_jit_forget_all();
    NB_EXPECT_OK(nb_jit_load(NULL, src, "k_cc", NULL, &k));
    NB_EXPECT(run_check(k, 100, 111));
    unsetenv("CC");
    nb_env_reload();
    nb_jit_forget_all();
    NB_REQUIRE_OK(nb_jit_load(NULL, src, "k_cc", NULL, &k));
    NB_EXPECT(run_check(k, 100, 11));
    NB_EXPECT(stats().compiles == 2);
}

static void test_unusable_cache_dir(void) {
    fresh();
    /* A path below a regular file cannot be created, even by root. */
    char file[1200], dir[1300];
    snprintf(file, sizeof file, "%s/a-file", g_root);
    FILE *f = fopen(file, "w");
    NB_REQUIRE_OK(f ? NB_OK : NB_ERR_IO);
    fclose(f);
    snprintf(dir, sizeof dir, "%s/cache", file);
    setenv("NABLA_CACHE_DIR", dir, 1);
    nb_env_reload();
    char src[2048];
    make_src(src, sizeof src, "k_nodir", 12);
    nb_jit_kernel *k;
    capture_warnings();
    nb_status st = nb_jit_load(NULL, src, "k_nodir", NULL, &k);
    nb_log_set_sink(NULL, NULL);
    NB_REQUIRE_OK(st);
    NB_EXPECT(strstr(g_warn, "not usable") && strstr(g_warn, dir));
    NB_EXPECT(run_check(k, 1000, 12));
    nb_jit_stats_t s = stats();
    NB_EXPECT(s.compiles == 1 && s.uncached == 1);
    NB_EXPECT(nb_jit_load(NULL, src, "k_nodir", NULL, &k) == NB_OK && stats().memory_hits == 1);
    /* no_disk_cache: compiled privately even with a good cache directory. */
    setenv("NABLA_CACHE_DIR", g_cache, 1);
    nb_env_reload();
    nb_jit_options o = {.no_disk_cache = 1};
    make_src(src, sizeof src, "k_nodisk", 13);
    NB_REQUIRE_OK(nb_jit_load(NULL, src, "k_nodisk", &o, &k));
    NB_EXPECT(run_check(k, 10, 13));
    char path[1300];
    entry_path(path, sizeof path, nb_jit_kernel_key(k), "so");
    NB_EXPECT(!exists(path));
    NB_EXPECT(stats().uncached == 2);
}

typedef struct thread_arg {
    const char *src;
    nb_jit_kernel *k;
    nb_status st;
} thread_arg;

static void *load_thread(void *p) {
    thread_arg *a = p;
    a->st = nb_jit_load(NULL, a->src, "k_threads", NULL, &a->k);
    return NULL;
}

static void test_threads_compile_once(void) {
    fresh();
    char src[2048];
    make_src(src, sizeof src, "k_threads", 14);
    pthread_t t[8];
    thread_arg a[8];
    for (int i = 0; i < 8; i++) {
        a[i] = (thread_arg){src, NULL, NB_ERR_INTERNAL};
        pthread_create(&t[i], NULL, load_thread, &a[i]);
    }
    for (int i = 0; i < 8; i++) pthread_join(t[i], NULL);
    for (int i = 0; i < 8; i++) NB_EXPECT(a[i].st == NB_OK && a[i].k == a[0].k);
    nb_jit_stats_t s = stats();
    NB_EXPECT(s.compiles == 1 && s.memory_hits == 7);
}

typedef struct list_count {
    int n, valid;
} list_count;

static int count_entry(const nb_kernel_cache_entry *e, void *user) {
    list_count *c = user;
    c->n++;
    c->valid += e->valid && e->has_source && !strcmp(e->kind, "so") && e->file_size > 0;
    return 0;
}

static void test_list_and_clear(void) {
    fresh();
    char src[2048];
    make_src(src, sizeof src, "k_list", 15);
    nb_jit_kernel *k;
    NB_REQUIRE_OK(nb_jit_load(NULL, src, "k_list", NULL, &k));
    list_count c = {0, 0};
    NB_EXPECT_OK(nb_kernel_cache_list(count_entry, &c));
    NB_EXPECT(c.n >= 1 && c.valid == c.n);
    /* A damaged entry shows as invalid (listing never deletes anything). */
    char path[1300];
    entry_path(path, sizeof path, nb_jit_kernel_key(k), "so");
    nb_jit_forget_all();
    NB_EXPECT(truncate(path, 100) == 0);
    list_count c2 = {0, 0};
    NB_EXPECT_OK(nb_kernel_cache_list(count_entry, &c2));
    NB_EXPECT(c2.n == c.n && c2.valid == c.n - 1);
    /* clear removes the cache's files and nothing else. */
    char keep[1300];
    snprintf(keep, sizeof keep, "%s/keep-me.txt", g_cache);
    FILE *f = fopen(keep, "w");
    if (f) fclose(f);
    size_t removed = 0;
    NB_EXPECT_OK(nb_kernel_cache_clear(&removed));
    NB_EXPECT(removed >= 2 * (size_t)c.n); /* artifact + source each */
    list_count c3 = {0, 0};
    NB_EXPECT_OK(nb_kernel_cache_list(count_entry, &c3));
    NB_EXPECT(c3.n == 0);
    NB_EXPECT(exists(keep));
    /* A missing directory is an empty cache. */
    setenv("NABLA_CACHE_DIR", "/nonexistent/nabla-cache", 1);
    nb_env_reload();
    NB_EXPECT_OK(nb_kernel_cache_list(count_entry, &c3));
    NB_EXPECT_OK(nb_kernel_cache_clear(&removed));
    NB_EXPECT(removed == 0);
    setenv("NABLA_CACHE_DIR", g_cache, 1);
    nb_env_reload();
}

/* `test_jit --child-load TOKEN`: a fresh process compiles (or loads) the kernel of TOKEN, runs it
 * and exits 0, else prints why. An alarm turns a hang into a failure. */
static int child_load(const char *token) {
    alarm(60);
    nb_jit_kernel *k;
    if (load_token("k_child", atoi(token), &k) != NB_OK) {
        fprintf(stderr, "child %s: %s\n", token, nb_last_error());
        return 10;
    }
    if (!run_check(k, 100, atoi(token))) return 13;
    nb_jit_forget_all();
    return 0;
}

/* `nabla cache clear` run in a loop beside many cold compiles in other processes never makes one
 * of them fail (issue #21: clear deleted the .c a compile was about to read). */
static void test_clear_beside_compiles(void) {
    fresh();
    enum { NPROC = 32 };
    int stop[2];
    NB_REQUIRE_OK(pipe(stop) == 0 ? NB_OK : NB_ERR_IO);
    pid_t clearer = fork();
    if (clearer == 0) { /* clears until the parent closes the pipe; exit 1 if a clear failed */
        close(stop[1]);
        fcntl(stop[0], F_SETFL, O_NONBLOCK);
        int bad = 0;
        char c;
        while (read(stop[0], &c, 1) < 0 && errno == EAGAIN) {
            size_t removed;
            if (nb_kernel_cache_clear(&removed) != NB_OK) {
                fprintf(stderr, "  clear: %s\n", nb_last_error());
                bad = 1;
            }
        }
        _exit(bad);
    }
    close(stop[0]);
    int base = 5000 + (int)(time(NULL) % 100000) * 40; /* cold: keys no earlier run left */
    pid_t kids[NPROC];
    for (int i = 0; i < NPROC; i++) kids[i] = spawn_self("--child-load", base + i);
    int failed = 0;
    for (int i = 0; i < NPROC; i++) {
        int status = -1;
        if (kids[i] <= 0 || waitpid(kids[i], &status, 0) != kids[i] || !WIFEXITED(status) ||
            WEXITSTATUS(status) != 0) {
            failed++;
            fprintf(stderr, "  compile process %d: status %d\n", i, status);
        }
    }
    close(stop[1]);
    int status = -1;
    NB_EXPECT(clearer > 0 && waitpid(clearer, &status, 0) == clearer);
    NB_EXPECT(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    NB_EXPECT(failed == 0);
    /* Nothing of the compiles is left behind once clear runs alone. */
    size_t removed;
    NB_EXPECT_OK(nb_kernel_cache_clear(&removed));
    NB_EXPECT(count_temp_files() == 0);
}

/* A compile's work directory (.tmp-<key>-XXXXXX, locked by its process) survives a clear while
 * it is locked, and goes with the next clear once its process is gone. */
static void test_clear_skips_locked_work_dir(void) {
    fresh();
    NB_REQUIRE_OK(mkdir(g_cache, 0755) == 0 || errno == EEXIST ? NB_OK : NB_ERR_IO);
    char wd[1300], file[1400];
    snprintf(wd, sizeof wd, "%s/.tmp-0123456789abcdef0123456789abcdef-AbCdEf", g_cache);
    snprintf(file, sizeof file, "%s/0123456789abcdef0123456789abcdef.c", wd);
    NB_REQUIRE_OK(mkdir(wd, 0755) == 0 ? NB_OK : NB_ERR_IO);
    FILE *f = fopen(file, "w");
    NB_REQUIRE_OK(f ? NB_OK : NB_ERR_IO);
    fclose(f);
    int fd = open(wd, O_RDONLY | O_DIRECTORY);
    NB_REQUIRE_OK(fd >= 0 && flock(fd, LOCK_EX) == 0 ? NB_OK : NB_ERR_IO);
    size_t removed = 0;
    NB_EXPECT_OK(nb_kernel_cache_clear(&removed));
    NB_EXPECT(exists(file));
    close(fd); /* the compile is over (or its process died) */
    NB_EXPECT_OK(nb_kernel_cache_clear(&removed));
    NB_EXPECT(!exists(file) && !exists(wd) && removed >= 1);
}

/* A FIFO (or a directory) where an entry should be is never opened for reading (that would
 * block forever): the entry is rebuilt, and listing the cache does not hang either. */
static void test_fifo_entry(void) {
    fresh();
    nb_jit_kernel *k;
    NB_REQUIRE_OK(load_token("k_child", 31, &k));
    char path[1300];
    entry_path(path, sizeof path, nb_jit_kernel_key(k), "so");
    nb_jit_forget_all();
    NB_REQUIRE_OK(unlink(path) == 0 && mkfifo(path, 0644) == 0 ? NB_OK : NB_ERR_IO);
    alarm(60); /* a hang fails the test instead of the CI job */
    list_count c = {0, 0};
    NB_EXPECT_OK(nb_kernel_cache_list(count_entry, &c));
    NB_EXPECT(c.n >= 1 && c.valid == c.n - 1);
    capture_warnings();
    pid_t pid = spawn_self("--child-load", 31);
    int status = -1;
    NB_EXPECT(pid > 0 && waitpid(pid, &status, 0) == pid);
    NB_EXPECT(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    struct stat sb;
    NB_EXPECT(lstat(path, &sb) == 0 && S_ISREG(sb.st_mode)); /* rebuilt */
    /* In this process too, with the FIFO back in place: rebuilt, with a warning naming it. */
    NB_REQUIRE_OK(unlink(path) == 0 && mkfifo(path, 0644) == 0 ? NB_OK : NB_ERR_IO);
    NB_EXPECT_OK(load_token("k_child", 31, &k));
    NB_EXPECT(run_check(k, 100, 31));
    NB_EXPECT(strstr(g_warn, "not a regular file") != NULL);
    NB_EXPECT(lstat(path, &sb) == 0 && S_ISREG(sb.st_mode));
    /* A directory in its place: still loads (compiled privately if it cannot be replaced). */
    nb_jit_forget_all();
    NB_REQUIRE_OK(unlink(path) == 0 && mkdir(path, 0755) == 0 ? NB_OK : NB_ERR_IO);
    NB_EXPECT_OK(load_token("k_child", 31, &k));
    NB_EXPECT(run_check(k, 100, 31));
    nb_log_set_sink(NULL, NULL);
    nb_jit_forget_all();
    rmdir(path);
    alarm(0);
}

static void test_cache_dir_resolution(void) {
    char buf[4096], want[1200];
    char *home = getenv("HOME") ? strdup(getenv("HOME")) : NULL;
    setenv("NABLA_CACHE_DIR", "/some/where/", 1);
    nb_env_reload();
    NB_EXPECT_OK(nb_kernel_cache_dir(buf, sizeof buf));
    NB_EXPECT(!strcmp(buf, "/some/where"));
    unsetenv("NABLA_CACHE_DIR");
    nb_env_reload();
    setenv("HOME", "/home/someone", 1);
    nb_env_reload();
    NB_EXPECT_OK(nb_kernel_cache_dir(buf, sizeof buf));
    NB_EXPECT(!strcmp(buf, "/home/someone/.cache/nabla"));
    unsetenv("HOME");
    nb_env_reload();
    NB_EXPECT_OK(nb_kernel_cache_dir(buf, sizeof buf));
    snprintf(want, sizeof want, "/tmp/nabla-cache-%lu", (unsigned long)geteuid());
    NB_EXPECT(!strcmp(buf, want));
    NB_EXPECT_ERR(nb_kernel_cache_dir(buf, 8), NB_ERR_INVALID_ARG, "too long");
    if (home) setenv("HOME", home, 1);
    nb_env_reload();
    free(home);
    setenv("NABLA_CACHE_DIR", g_cache, 1);
    nb_env_reload();
}

/* ---- CUDA (skips without a GPU) ------------------------------------------------------------ */

static const char *CU_SRC =
    "struct P { float *out; const float *in; float scale; long long n; };\n"
    "extern \"C\" __global__ void k_scale(P p) {\n"
    "    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < p.n;\n"
    "         i += (long long)blockDim.x * gridDim.x)\n"
    "        p.out[i] = p.in[i] * p.scale + 1.0f;\n"
    "}\n"
    "extern \"C\" __global__ void k_grid(P p) {\n" /* [Kernel]-style: one thread per index */
    "    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;\n"
    "    if (i < p.n) p.out[i] = p.in[i] - p.scale;\n"
    "}\n";

typedef struct cu_params { /* matches struct P: 8 + 8 + 4 (+4 padding) + 8 = 32 bytes */
    uint64_t out, in;
    float scale;
    int64_t n;
} cu_params;

static void test_cuda_path(void) {
    if (nb_cuda_device_count() == 0) NB_SKIP("no CUDA device");
    if (nb_nvrtc_version() == 0) NB_SKIP("no NVRTC");
    fresh();
    nb_device *dev = NULL;
    NB_REQUIRE_OK(nb_device_open("cuda", &dev));
    const int64_t n = 1000003;
    size_t bytes = sizeof(float) * (size_t)n;
    float *host = malloc(bytes), *back = malloc(bytes);
    nb_buffer *in = NULL, *out = NULL;
    nb_jit_kernel *k = NULL, *k2 = NULL;
    NB_EXPECT_OK(nb_buffer_alloc(dev, bytes, &in));
    NB_EXPECT_OK(nb_buffer_alloc(dev, bytes, &out));
    if (!host || !back || !in || !out) goto done;
    for (int64_t i = 0; i < n; i++) host[i] = (float)(i % 1000) * 0.25f;
    NB_EXPECT_OK(nb_memcpy_h2d(dev, nb_buffer_ptr(in), host, bytes));
    cu_params p = {(uint64_t)(uintptr_t)nb_buffer_ptr(out), (uint64_t)(uintptr_t)nb_buffer_ptr(in),
                   3.0f, n};
    nb_status st = nb_jit_load(dev, CU_SRC, "k_scale", NULL, &k);
    NB_EXPECT_OK(st);
    if (st != NB_OK) goto done;
    NB_EXPECT(nb_jit_kernel_kind(k) == NB_DEVICE_CUDA && nb_jit_kernel_cuda_fn(k) && !nb_jit_kernel_cpu_fn(k));
    NB_EXPECT(stats().compiles == 1);
    NB_EXPECT_OK(nb_jit_launch_cuda(k, &p, sizeof p, n, NULL));
    NB_EXPECT_OK(nb_memcpy_d2h(dev, back, nb_buffer_ptr(out), bytes));
    int bad = 0;
    for (int64_t i = 0; i < n; i++) bad += back[i] != host[i] * 3.0f + 1.0f;
    NB_EXPECT(bad == 0);
    NB_EXPECT_OK(nb_jit_launch_cuda(k, &p, sizeof p, 0, NULL));
    NB_EXPECT_ERR(nb_jit_launch_cpu(k, &p, 10), NB_ERR_INVALID_ARG, "not a CPU");
    /* Memory hit, then a disk hit from the cubin/ptx entry. */
    NB_EXPECT_OK(nb_jit_load(dev, CU_SRC, "k_scale", NULL, &k2));
    NB_EXPECT(k2 == k && stats().memory_hits == 1);
    char key[33], path[1300], ptx[1300];
    snprintf(key, sizeof key, "%s", nb_jit_kernel_key(k));
    entry_path(path, sizeof path, key, "cubin");
    entry_path(ptx, sizeof ptx, key, "ptx");
    NB_EXPECT(exists(path) || exists(ptx));
    if (!exists(path)) snprintf(path, sizeof path, "%s", ptx);
    nb_jit_forget_all();
    nb_jit_stats_reset();
    NB_EXPECT_OK(nb_jit_load(dev, CU_SRC, "k_scale", NULL, &k));
    NB_EXPECT(stats().disk_hits == 1 && stats().compiles == 0);
    /* Explicit grid, for [Kernel] functions: another entry of the same module source. */
    NB_EXPECT_OK(nb_jit_load(dev, CU_SRC, "k_grid", NULL, &k2));
    const unsigned grid[3] = {(unsigned)((n + 127) / 128), 1, 1}, block[3] = {128, 1, 1};
    NB_EXPECT_OK(nb_jit_launch_cuda_grid(k2, &p, sizeof p, grid, block, NULL));
    NB_EXPECT_OK(nb_memcpy_d2h(dev, back, nb_buffer_ptr(out), bytes));
    bad = 0;
    for (int64_t i = 0; i < n; i++) bad += back[i] != host[i] - 3.0f;
    NB_EXPECT(bad == 0);
    /* A corrupt entry is rebuilt. */
    nb_jit_forget_all();
    NB_EXPECT(truncate(path, 64) == 0);
    nb_jit_stats_reset();
    capture_warnings();
    st = nb_jit_load(dev, CU_SRC, "k_scale", NULL, &k);
    nb_log_set_sink(NULL, NULL);
    NB_EXPECT_OK(st);
    NB_EXPECT(stats().corrupt_entries == 1 && stats().compiles == 1);
    if (st == NB_OK) NB_EXPECT_OK(nb_jit_launch_cuda(k, &p, sizeof p, n, NULL));
    NB_EXPECT_OK(nb_device_synchronize(dev));
    /* PTX (a virtual architecture in the options): another key, stored as <key>.ptx. */
    char arch[64];
    const nb_device_info *inf = nb_device_get_info(dev);
    snprintf(arch, sizeof arch, "--gpu-architecture=compute_%d%d", inf->cc_major, inf->cc_minor);
    const char *nv[] = {arch, NULL};
    nb_jit_options po = {.name = "ptx-test", .nvrtc_opts = nv};
    st = nb_jit_load(dev, CU_SRC, "k_scale", &po, &k2);
    NB_EXPECT_OK(st);
    if (st == NB_OK) {
        NB_EXPECT(k2 != k && strcmp(nb_jit_kernel_key(k2), nb_jit_kernel_key(k)) != 0);
        entry_path(ptx, sizeof ptx, nb_jit_kernel_key(k2), "ptx");
        NB_EXPECT(exists(ptx));
        NB_EXPECT_OK(nb_jit_launch_cuda(k2, &p, sizeof p, n, NULL));
        NB_EXPECT_OK(nb_memcpy_d2h(dev, back, nb_buffer_ptr(out), bytes));
        bad = 0;
        for (int64_t i = 0; i < n; i++) bad += back[i] != host[i] * 3.0f + 1.0f;
        NB_EXPECT(bad == 0);
    }
    /* Compile errors carry NVRTC's log. */
    NB_EXPECT_ERR(nb_jit_load(dev, "extern \"C\" __global__ void k(int x) { nope(); }", "k", NULL, &k),
                  NB_ERR_COMPILE, "nope");
done:
    nb_jit_forget_all();
    nb_buffer_release(in);
    nb_buffer_release(out);
    free(host);
    free(back);
    nb_device_close(dev);
}

int main(int argc, char **argv) {
    if (argc > 2 && !strcmp(argv[1], "--child-reuse")) return child_reuse(argv[2]);
    if (argc > 2 && !strcmp(argv[1], "--child-load")) return child_load(argv[2]);
    ssize_t n = readlink("/proc/self/exe", g_self, sizeof g_self - 1);
    if (n > 0) g_self[n] = '\0';
    else snprintf(g_self, sizeof g_self, "%s", argv[0]);
    const char *tmp = getenv("TMPDIR");
    snprintf(g_root, sizeof g_root, "%s/nabla test jit XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
    if (!mkdtemp(g_root)) {
        perror("mkdtemp");
        return 1;
    }
    atexit(cleanup); /* forked children leave with _exit and do not run it */
    snprintf(g_cache, sizeof g_cache, "%s/cache", g_root);
    setenv("NABLA_CACHE_DIR", g_cache, 1);
    nb_env_reload();
    NB_TEST_MAIN(argc, argv, test_compile_and_run, test_memory_hit_is_cheap,
                 test_disk_hit_after_forget, test_key_changes, test_corrupt_entry_rebuilt,
                 test_two_processes_compile_concurrently, test_second_process_reuses,
                 test_compile_error, test_compiler_from_env, test_unusable_cache_dir,
                 test_threads_compile_once, test_list_and_clear, test_cache_dir_resolution,
                 test_clear_beside_compiles, test_clear_skips_locked_work_dir, test_fifo_entry,
                 test_cuda_path);
}
