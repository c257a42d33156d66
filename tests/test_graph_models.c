/* The built-in graph models (include/nabla/graph_models.h) and nb_graph_value_info: each model's
 * recorded step replays to the immediate-mode results bit for bit on the CPU (prediction, loss,
 * parameter gradients), the UNet from a timestep embedding made before recording (a constant;
 * nb_unet_forward_emb gives nb_unet_forward's result), value roles and shapes, errors. */
#include <stdlib.h>
#include <string.h>

#include "nabla/nabla.h"
#include "nb_test.h"

#define REQUIRE(c)                                                                             \
    do {                                                                                       \
        NB_EXPECT(c);                                                                          \
        if (!(c)) return;                                                                      \
    } while (0)

static int64_t numel(const nb_graph_value *vi) {
    int64_t n = 1;
    for (int k = 0; k < vi->ndim; k++) n *= vi->shape[k];
    return n;
}

/* Reads value v of the tape (immediate) and of the graph (after a run); expects equal bits. */
static void same_value(nb_graph_model *m, nb_tvar v) {
    nb_graph *g = nb_graph_model_graph(m);
    nb_graph_value vi;
    NB_REQUIRE_OK(nb_graph_value_info(g, v, &vi));
    int64_t n = numel(&vi);
    float *a = malloc(n * sizeof(float)), *b = malloc(n * sizeof(float));
    REQUIRE(a && b);
    NB_EXPECT_OK(nb_tape_read(nb_graph_model_tape(m), v, a, n));
    NB_EXPECT_OK(nb_graph_read(g, v, b, n));
    NB_EXPECT(!memcmp(a, b, n * sizeof(float)));
    free(a);
    free(b);
}

static void check_model(const char *name, int n_consts) {
    nb_graph_model *m = NULL;
    NB_REQUIRE_OK(nb_graph_model_record(name, NULL, 7, &m));
    nb_graph *g = nb_graph_model_graph(m);
    nb_tape *t = nb_graph_model_tape(m);
    nb_graph_info info;
    NB_REQUIRE_OK(nb_graph_get_info(g, &info));
    NB_EXPECT(info.n_inputs == 2 && info.n_outputs == 2 && info.has_backward && info.n_consts == n_consts);
    NB_EXPECT(info.loss == nb_graph_model_loss(m));
    /* the immediate step's parameter gradients, then the replay's (same inputs) */
    float *gp;
    int64_t np;
    NB_REQUIRE_OK(nb_tape_grads(t, &gp, &np));
    float *imm = malloc(np * sizeof(float)), *rep = malloc(np * sizeof(float));
    REQUIRE(imm && rep);
    NB_REQUIRE_OK(nb_tape_read_grads(t, imm, np));
    NB_REQUIRE_OK(nb_tape_zero_grad(t));
    NB_REQUIRE_OK(nb_graph_run(g));
    NB_REQUIRE_OK(nb_tape_read_grads(t, rep, np));
    NB_EXPECT(!memcmp(imm, rep, np * sizeof(float)));
    same_value(m, nb_graph_model_prediction(m));
    same_value(m, nb_graph_model_loss(m));
    free(imm);
    free(rep);
    /* value facts */
    nb_graph_value vi;
    nb_tvar x;
    NB_REQUIRE_OK(nb_graph_input(g, 0, &x));
    NB_EXPECT_OK(nb_graph_value_info(g, x, &vi));
    NB_EXPECT(vi.role == NB_GRAPH_INPUT && vi.input_index == 0 && vi.dtype == NB_F32 && !vi.output);
    NB_EXPECT_OK(nb_graph_value_info(g, nb_graph_model_prediction(m), &vi));
    NB_EXPECT(vi.role == NB_GRAPH_ACT && vi.output && vi.input_index == -1 && vi.needs_grad);
    NB_EXPECT_OK(nb_graph_value_info(g, 0, &vi));
    NB_EXPECT(vi.role == NB_GRAPH_PARAM && vi.ndim >= 1);
    NB_EXPECT_ERR(nb_graph_value_info(g, info.n_values, &vi), NB_ERR_INVALID_ARG, "not a value of the graph");
    NB_EXPECT_ERR(nb_graph_value_info(g, -1, &vi), NB_ERR_INVALID_ARG, "not a value of the graph");
    NB_EXPECT_ERR(nb_graph_value_info(NULL, 0, &vi), NB_ERR_INVALID_ARG, "NULL");
    NB_EXPECT_ERR(nb_graph_value_info(g, 0, NULL), NB_ERR_INVALID_ARG, "NULL");
    nb_graph_model_free(m);
}

static void test_mlp(void) { check_model("mlp", 0); }
static void test_unet(void) { check_model("unet", 1); }

static void test_list_and_errors(void) {
    const char *help = NULL;
    NB_EXPECT(!strcmp(nb_graph_model_list(0, &help), "mlp") && help && strstr(help, "linear"));
    NB_EXPECT(!strcmp(nb_graph_model_list(1, NULL), "unet"));
    NB_EXPECT(nb_graph_model_list(2, &help) == NULL && nb_graph_model_list(-1, NULL) == NULL);
    nb_graph_model *m = (nb_graph_model *)1;
    NB_EXPECT_ERR(nb_graph_model_record("resnet", NULL, 0, &m), NB_ERR_NOT_FOUND, "unknown (mlp, unet)");
    NB_EXPECT(m == NULL);
    NB_EXPECT_ERR(nb_graph_model_record(NULL, NULL, 0, &m), NB_ERR_INVALID_ARG, "NULL");
    NB_EXPECT(nb_graph_model_graph(NULL) == NULL && nb_graph_model_loss(NULL) == NB_TVAR_NONE);
    nb_graph_model_free(NULL);
}

/* nb_unet_forward_emb from the embedding nb_unet_forward makes = nb_unet_forward, bit for bit. */
static void test_unet_forward_emb(void) {
    static const char *const knobs[][2] = {
        {"image_size", "8"},      {"in_channels", "2"},    {"out_channels", "2"}, {"model_channels", "16"},
        {"channel_mult", "1,2"},  {"num_res_blocks", "1"}, {"attention_resolutions", "4"},
        {"num_head_channels", "16"}, {"num_groups", "4"},
    };
    nb_unet_config c = nb_unet_config_reference();
    for (size_t k = 0; k < sizeof knobs / sizeof knobs[0]; k++) NB_REQUIRE_OK(nb_unet_config_set(&c, knobs[k][0], knobs[k][1]));
    nb_tape *t;
    nb_unet *u;
    NB_REQUIRE_OK(nb_tape_create(&t));
    NB_REQUIRE_OK(nb_unet_create(&c, t, &u));
    NB_REQUIRE_OK(nb_unet_init(u, 3));
    float xs[2 * 2 * 8 * 8], ts[2] = {3.0f, 700.0f};
    for (int i = 0; i < 2 * 2 * 8 * 8; i++) xs[i] = (float)((i * 37) % 17) / 8.0f - 1.0f;
    nb_tvar x, y1, y2, emb;
    NB_REQUIRE_OK(nb_tape_input(t, 4, (int64_t[]){2, 2, 8, 8}, xs, 0, &x));
    NB_REQUIRE_OK(nb_unet_forward(u, x, ts, &y1));
    NB_REQUIRE_OK(nb_tape_timestep_embedding(t, 2, ts, 16, 10000.0f, &emb));
    NB_REQUIRE_OK(nb_unet_forward_emb(u, x, emb, &y2));
    float a[2 * 2 * 8 * 8], b[2 * 2 * 8 * 8];
    NB_REQUIRE_OK(nb_tape_read(t, y1, a, 256));
    NB_REQUIRE_OK(nb_tape_read(t, y2, b, 256));
    NB_EXPECT(!memcmp(a, b, sizeof a));
    nb_tvar bad;
    NB_REQUIRE_OK(nb_tape_timestep_embedding(t, 2, ts, 8, 10000.0f, &bad));
    NB_EXPECT_ERR(nb_unet_forward_emb(u, x, bad, &y2), NB_ERR_SHAPE, "the embedding must be [2,16]");
    NB_EXPECT_ERR(nb_unet_forward_emb(u, x, emb, NULL), NB_ERR_INVALID_ARG, "NULL");
    nb_unet_free(u);
    nb_tape_free(t);
}

int main(int argc, char **argv) {
    NB_TEST_MAIN(argc, argv, test_mlp, test_unet, test_list_and_errors, test_unet_forward_emb);
}
