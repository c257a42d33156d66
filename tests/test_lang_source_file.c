/* Kernel-language source files (lang/source.c): nb_source_load reads regular files only; a FIFO
 * in place of a .nb file is refused at once instead of blocking in open() (the reader runs in a
 * child with an alarm, so a regression fails instead of hanging); a missing file and a directory
 * are named. */
#include <sys/stat.h>
#include <unistd.h>

#include "lang/source.h"
#include "nb_test.h"
#include "nb_test_fifo.h"

static char dir[] = "/tmp/nabla_src_XXXXXX";

static const char *path_of(const char *name) {
    static char buf[256];
    snprintf(buf, sizeof buf, "%s/%s", dir, name);
    return buf;
}

static void test_load_regular(void) {
    const char *p = path_of("ok.nb");
    FILE *f = fopen(p, "wb");
    NB_REQUIRE_OK(f ? NB_OK : NB_ERR_IO);
    const char *text = "float f(float x) { return x; }\nfloat g(float x) { return 2 * x; }\n";
    fputs(text, f);
    fclose(f);
    nb_source_set s;
    nb_source_set_init(&s);
    int idx = -1;
    NB_EXPECT_OK(nb_source_load(&s, p, &idx));
    NB_EXPECT(idx == 0 && s.nfiles == 1 && s.files[0].len == strlen(text) && s.files[0].nlines >= 2);
    NB_EXPECT(!strncmp(s.files[0].text, "float f(", 8));
    NB_EXPECT_ERR(nb_source_load(&s, path_of("missing.nb"), &idx), NB_ERR_IO, "missing.nb");
    NB_EXPECT(mkdir(path_of("dir.nb"), 0700) == 0);
    NB_EXPECT_ERR(nb_source_load(&s, path_of("dir.nb"), &idx), NB_ERR_IO, "not a regular file");
    nb_source_set_free(&s);
}

static nb_status load_source(const char *p) {
    nb_source_set s;
    nb_source_set_init(&s);
    nb_status st = nb_source_load(&s, p, NULL);
    nb_source_set_free(&s);
    return st;
}

static void test_fifo(void) { NB_EXPECT(nb_test_fifo_refused(path_of("fifo.nb"), load_source)); }

static void cleanup(void) { nb_test_rm_rf(dir); }

int main(int argc, char **argv) {
    if (!mkdtemp(dir)) return 1;
    atexit(cleanup);
    NB_TEST_MAIN(argc, argv, test_load_regular, test_fifo);
}
