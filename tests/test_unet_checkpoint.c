/* UNet checkpoints (unet_io.c) against bad files: a config error in the metadata comes out
 * intact (nb_error used to format its own buffer into itself), NaN / Inf parameters are refused
 * naming the tensor, a duplicate-key header fails cleanly through nb_unet_read_config, and a
 * FIFO in place of the checkpoint is refused without blocking. */
#include <math.h>
#include <unistd.h>

#include "nb_test.h"
#include "nb_test_fifo.h"
#include "nabla/nn_unet.h"
#include "nabla/safetensors.h"

static char dir[] = "/tmp/nabla_unet_ck_XXXXXX";

static const char *path_of(const char *name) {
    static char buf[4][256];
    static int k;
    k = (k + 1) & 3;
    snprintf(buf[k], sizeof buf[k], "%s/%s", dir, name);
    return buf[k];
}

/* A tiny UNet (8x8, two levels, attention at 4x4), spelled as checkpoint metadata. */
static const char *const tiny_meta[NB_UNET_META_N][2] = {
    {"image_size", "8"},     {"in_channels", "1"},           {"out_channels", "1"},
    {"model_channels", "8"}, {"channel_mult", "1,2"},        {"num_res_blocks", "1"},
    {"attention_resolutions", "4"}, {"num_head_channels", "8"}, {"conv_resample", "0"},
    {"num_groups", "4"}};

static nb_unet_config tiny(void) {
    nb_unet_config c = nb_unet_config_reference();
    for (int i = 0; i < NB_UNET_META_N; i++)
        if (nb_unet_config_set(&c, tiny_meta[i][0], tiny_meta[i][1]) != NB_OK)
            fprintf(stderr, "  tiny config: %s\n", nb_last_error());
    return c;
}

/* Writes a checkpoint-shaped file: the tiny config's metadata with key `bad_key` set to
 * `bad_val` (none when NULL) and no tensors. */
static void write_meta(const char *path, const char *bad_key, const char *bad_val) {
    nb_unet_config c = tiny();
    const char *keys[NB_UNET_META_N];
    char vals[NB_UNET_META_N][64];
    const char *vp[NB_UNET_META_N];
    NB_REQUIRE_OK(nb_unet_config_to_meta(&c, keys, vals));
    for (int i = 0; i < NB_UNET_META_N; i++) vp[i] = bad_key && !strcmp(keys[i], bad_key) ? bad_val : vals[i];
    NB_REQUIRE_OK(nb_safetensors_write(path, 0, NULL, NB_UNET_META_N, keys, vp));
}

static void test_config_error_intact(void) {
    const char *p = path_of("badcfg.safetensors");
    nb_unet_config rc;
    write_meta(p, "image_size", "abc");
    char want[512];
    snprintf(want, sizeof want, "'%s': bad UNet config in its metadata: UNet config key 'image_size': 'abc' is not an integer", p);
    NB_EXPECT_ERR(nb_unet_read_config(p, &rc), NB_ERR_INVALID_ARG, want);
    /* a config that parses but does not validate: the file's name, then the validator's words */
    write_meta(p, "num_groups", "3");
    nb_unet_config c = tiny();
    c.num_groups = 3;
    NB_REQUIRE_OK(nb_unet_config_validate(&c) == NB_OK ? NB_ERR_INTERNAL : NB_OK);
    char cause[400];
    snprintf(cause, sizeof cause, "%s", nb_last_error());
    snprintf(want, sizeof want, "'%s': %s", p, cause);
    NB_EXPECT_ERR(nb_unet_read_config(p, &rc), NB_ERR_INVALID_ARG, want);
    /* the same through nb_unet_load */
    nb_tape *t;
    nb_unet *u = NULL;
    c = tiny();
    NB_REQUIRE_OK(nb_tape_create(&t));
    NB_REQUIRE_OK(nb_unet_create(&c, t, &u));
    write_meta(p, "model_channels", "eight");
    NB_EXPECT_ERR(nb_unet_load(u, p), NB_ERR_INVALID_ARG,
                  "bad UNet config in its metadata: UNet config key 'model_channels': 'eight' is not an integer");
    nb_unet_free(u);
    nb_tape_free(t);
}

/* The 40-byte file whose second "dtype" is a number used to abort the process (double free). */
static void test_duplicate_dtype_file(void) {
    const char *f = __FILE__, *slash = strrchr(f, '/');
    char p[1024];
    snprintf(p, sizeof p, "%.*s%sdata/st_dup_dtype.safetensors", slash ? (int)(slash - f) : 0, f, slash ? "/" : "");
    nb_unet_config rc;
    NB_EXPECT_ERR(nb_unet_read_config(p, &rc), NB_ERR_IO, "key 'dtype' appears twice");
}

static void test_nonfinite_params(void) {
    nb_tape *t;
    nb_unet *u = NULL;
    nb_unet_config c = tiny();
    NB_REQUIRE_OK(nb_tape_create(&t));
    NB_REQUIRE_OK(nb_unet_create(&c, t, &u));
    NB_REQUIRE_OK(nb_unet_init(u, 3));
    float *params;
    int64_t np;
    NB_REQUIRE_OK(nb_tape_params(t, &params, &np));
    const nb_unet_param_name *names;
    int n;
    NB_REQUIRE_OK(nb_unet_params(u, &names, &n));
    int64_t off, cnt;
    NB_REQUIRE_OK(nb_tape_param_info(t, names[n / 2].id, &off, &cnt));
    const char *p = path_of("ck.safetensors");
    NB_REQUIRE_OK(nb_unet_save(u, params, p));
    NB_EXPECT_OK(nb_unet_load(u, p));
    float *bad = malloc(sizeof(float) * (size_t)np);
    NB_REQUIRE_OK(bad ? NB_OK : NB_ERR_OUT_OF_MEMORY);
    const float vals[3] = {NAN, INFINITY, -INFINITY};
    for (int k = 0; k < 3; k++) {
        memcpy(bad, params, sizeof(float) * (size_t)np);
        bad[off + cnt - 1] = vals[k];
        NB_REQUIRE_OK(nb_unet_save(u, bad, p));
        char want[300];
        snprintf(want, sizeof want, "parameter '%s' holds a non-finite value", names[n / 2].name);
        NB_EXPECT_ERR(nb_unet_load(u, p), NB_ERR_INVALID_ARG, want);
        /* the model keeps its parameters */
        NB_EXPECT(isfinite(params[off + cnt - 1]));
    }
    free(bad);
    nb_unet_free(u);
    nb_tape_free(t);
}

static nb_status read_config(const char *p) {
    nb_unet_config rc;
    return nb_unet_read_config(p, &rc);
}

static void test_fifo(void) { NB_EXPECT(nb_test_fifo_refused(path_of("fifo.safetensors"), read_config)); }

static void cleanup(void) { nb_test_rm_rf(dir); }

int main(int argc, char **argv) {
    if (!mkdtemp(dir)) return 1;
    atexit(cleanup);
    NB_TEST_MAIN(argc, argv, test_config_error_intact, test_duplicate_dtype_file, test_nonfinite_params, test_fifo);
}
