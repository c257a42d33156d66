/* The environment registry (nabla/env.h, src/core/env.c): lookups, values read once and re-read
 * by nb_env_reload, the typed settings and their defaults, and a clear error for each kind of bad
 * value. `nabla env` itself: tests/cli/test_cli.sh. */
#include <stdlib.h>
#include <string.h>

#include "nabla/env.h"
#include "nabla/log.h"
#include "nb_test.h"

/* Sets (value != NULL) or unsets name and re-reads the registry. */
static void set(const char *name, const char *value) {
    if (value) setenv(name, value, 1);
    else unsetenv(name);
    nb_env_reload();
}

static void test_registry_lookups(void) {
    NB_EXPECT(nb_env_count() == NB_ENV_COUNT);
    for (int i = 0; i < nb_env_count(); i++) {
        const nb_env_var *e = nb_env_var_at(i);
        NB_EXPECT(e && e->name && e->def && e->values && e->meaning);
        if (!e) continue;
        NB_EXPECT(e->name[0] && e->def[0] && e->values[0] && e->meaning[0]);
        NB_EXPECT(nb_env_find(e->name) == i); /* every name once, at its own index */
    }
    NB_EXPECT(nb_env_var_at(-1) == NULL);
    NB_EXPECT(nb_env_var_at(NB_ENV_COUNT) == NULL);
    NB_EXPECT(nb_env_find("NABLA_NO_SUCH_SETTING") == -1);
    NB_EXPECT(nb_env_find("nabla_log") == -1); /* names are exact */
    NB_EXPECT(nb_env_find(NULL) == -1);
    NB_EXPECT(nb_env_find("NABLA_LOG") == NB_ENV_LOG);
    NB_EXPECT(!strcmp(nb_env_var_at(NB_ENV_CACHE_DIR)->name, "NABLA_CACHE_DIR"));
    NB_EXPECT(nb_env_get((nb_env_id)NB_ENV_COUNT) == NULL);
    NB_EXPECT_ERR(nb_env_check((nb_env_id)NB_ENV_COUNT), NB_ERR_INVALID_ARG, "no setting");
}

/* Read once: a change to the environment shows after nb_env_reload, not before. */
static void test_read_once_and_reload(void) {
    set("NABLA_FASHION_MNIST_DIR", "/data/one");
    NB_EXPECT(nb_env_get(NB_ENV_FASHION_MNIST_DIR) && !strcmp(nb_env_get(NB_ENV_FASHION_MNIST_DIR), "/data/one"));
    setenv("NABLA_FASHION_MNIST_DIR", "/data/two", 1);
    NB_EXPECT(!strcmp(nb_env_get(NB_ENV_FASHION_MNIST_DIR), "/data/one"));
    nb_env_reload();
    NB_EXPECT(!strcmp(nb_env_get(NB_ENV_FASHION_MNIST_DIR), "/data/two"));
    set("NABLA_FASHION_MNIST_DIR", ""); /* empty is unset */
    NB_EXPECT(nb_env_get(NB_ENV_FASHION_MNIST_DIR) == NULL);
    NB_EXPECT_OK(nb_env_check(NB_ENV_FASHION_MNIST_DIR));
    set("NABLA_FASHION_MNIST_DIR", NULL);
    NB_EXPECT(nb_env_get(NB_ENV_FASHION_MNIST_DIR) == NULL);
}

static void test_threads(void) {
    long n = 0;
    set("NABLA_THREADS", NULL);
    NB_EXPECT_OK(nb_env_threads(&n));
    NB_EXPECT(n >= 1); /* the CPU count */
    long cpus = n;
    set("NABLA_THREADS", "3");
    NB_EXPECT_OK(nb_env_threads(&n));
    NB_EXPECT(n == 3);
    NB_EXPECT_OK(nb_env_check(NB_ENV_THREADS));
    static const char *const bad[] = {"0", "-2", "1025", "abc", "4x", " 4", "99999999999999999999"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        set("NABLA_THREADS", bad[i]);
        n = 0;
        NB_EXPECT_ERR(nb_env_threads(&n), NB_ERR_INVALID_ARG, "$NABLA_THREADS=");
        NB_EXPECT(n == cpus); /* the default in *out */
        NB_EXPECT(strstr(nb_last_error(), bad[i]) != NULL);
        NB_EXPECT(strstr(nb_last_error(), "1..1024") != NULL);
        NB_EXPECT_ERR(nb_env_check(NB_ENV_THREADS), NB_ERR_INVALID_ARG, "not valid");
    }
    set("NABLA_THREADS", NULL);
    NB_EXPECT_ERR(nb_env_threads(NULL), NB_ERR_INVALID_ARG, "");
}

static void test_log_level(void) {
    int lv = -1;
    set("NABLA_LOG", NULL);
    NB_EXPECT_OK(nb_env_log_level(&lv));
    NB_EXPECT(lv == NB_LOG_WARN);
    set("NABLA_LOG", "DeBuG");
    NB_EXPECT_OK(nb_env_log_level(&lv));
    NB_EXPECT(lv == NB_LOG_DEBUG);
    set("NABLA_LOG", "off");
    NB_EXPECT_OK(nb_env_log_level(&lv));
    NB_EXPECT(lv == NB_LOG_OFF);
    set("NABLA_LOG", "bogus");
    NB_EXPECT_ERR(nb_env_log_level(&lv), NB_ERR_INVALID_ARG, "$NABLA_LOG='bogus' is not valid");
    NB_EXPECT(lv == NB_LOG_WARN);
    NB_EXPECT(strstr(nb_last_error(), "debug | info | warn | error | off") != NULL);
    set("NABLA_LOG", NULL);
}

static void test_cuda_graph(void) {
    int on = -1;
    set("NABLA_CUDA_GRAPH", NULL);
    NB_EXPECT_OK(nb_env_cuda_graph(&on));
    NB_EXPECT(on == 1);
    set("NABLA_CUDA_GRAPH", "0");
    NB_EXPECT_OK(nb_env_cuda_graph(&on));
    NB_EXPECT(on == 0);
    set("NABLA_CUDA_GRAPH", "1");
    NB_EXPECT_OK(nb_env_cuda_graph(&on));
    NB_EXPECT(on == 1);
    set("NABLA_CUDA_GRAPH", "yes");
    NB_EXPECT_ERR(nb_env_cuda_graph(&on), NB_ERR_INVALID_ARG, "$NABLA_CUDA_GRAPH='yes'");
    NB_EXPECT(on == 1);
    set("NABLA_CUDA_GRAPH", NULL);
}

/* A value too long for the registry's buffer is an error, never a silent cut. */
static void test_too_long(void) {
    size_t n = 5000;
    char *v = malloc(n + 1);
    memset(v, 'a', n);
    v[n] = '\0';
    set("NABLA_CFLAGS", v);
    NB_EXPECT(nb_env_get(NB_ENV_CFLAGS) == NULL);
    NB_EXPECT_ERR(nb_env_check(NB_ENV_CFLAGS), NB_ERR_INVALID_ARG, "$NABLA_CFLAGS is longer than 4095 bytes");
    set("NABLA_CFLAGS", NULL);
    NB_EXPECT_OK(nb_env_check(NB_ENV_CFLAGS));
    /* a typed getter reports it too, instead of taking the default */
    memset(v, '7', n);
    set("NABLA_THREADS", v);
    long threads = 0;
    NB_EXPECT_ERR(nb_env_threads(&threads), NB_ERR_INVALID_ARG, "$NABLA_THREADS is longer than 4095 bytes");
    set("NABLA_THREADS", NULL);
    free(v);
}

int main(int argc, char **argv) {
    NB_TEST_MAIN(argc, argv, test_registry_lookups, test_read_once_and_reload, test_threads,
                 test_log_level, test_cuda_graph, test_too_long);
}
