/* Interned types: identity, canonical names, shapes, differentials, conversion costs. */
#include "lang/ast.h"
#include "lang/check.h"
#include "lang/types.h"
#include "nb_test.h"

static void test_interning_and_names(void) {
    nb_arena a;
    nb_arena_init(&a, 0);
    nb_type_table t;
    nb_types_init(&t, &a);
    NB_EXPECT(nb_type_scalar(&t, NB_SC_FLOAT) == t.t_float);
    NB_EXPECT(nb_type_vector(&t, NB_SC_FLOAT, 1) == t.t_float);
    const nb_type *f3 = nb_type_vector(&t, NB_SC_FLOAT, 3);
    NB_EXPECT(f3 == nb_type_vector(&t, NB_SC_FLOAT, 3) && f3 != nb_type_vector(&t, NB_SC_INT, 3));
    NB_EXPECT(strcmp(f3->name, "float3") == 0 && f3->cols == 3 && f3->rows == 1);
    const nb_type *m = nb_type_matrix(&t, NB_SC_FLOAT, 3, 4);
    NB_EXPECT(strcmp(m->name, "float3x4") == 0 && nb_type_components(m) == 12);
    const nb_type *arr = nb_type_array(&t, nb_type_array(&t, f3, 2), 4);
    NB_EXPECT(strcmp(arr->name, "float3[4][2]") == 0 && arr == nb_type_array(&t, nb_type_array(&t, f3, 2), 4));
    const nb_type *ten = nb_type_tensor(&t, t.t_float, 2, 0), *dten = nb_type_tensor(&t, t.t_float, 2, 1);
    NB_EXPECT(ten != dten && strcmp(ten->name, "Tensor<float,2>") == 0 && strcmp(dten->name, "DiffTensor<float,2>") == 0);
    const nb_type *dp = nb_type_diffpair(&t, f3);
    NB_EXPECT(strcmp(dp->name, "DifferentialPair<float3>") == 0 && dp == nb_type_diffpair(&t, f3));
    NB_EXPECT(strcmp(nb_type_vector(&t, NB_SC_BOOL, 2)->name, "bool2") == 0);
    NB_EXPECT(strcmp(nb_type_scalar(&t, NB_SC_INT64)->name, "int64_t") == 0);
    NB_EXPECT(nb_type_vector(&t, NB_SC_FLOAT, 5) == t.t_error);
    nb_decl sd;
    memset(&sd, 0, sizeof sd);
    sd.kind = NB_DECL_STRUCT;
    sd.name = "S";
    const nb_type *s = nb_type_struct(&t, &sd);
    NB_EXPECT(s == nb_type_struct(&t, &sd) && strcmp(s->name, "S") == 0);
    NB_EXPECT(!nb_type_is_differentiable(s));
    const char *conf[] = {"IDifferentiable"};
    sd.u.strct.conforms = conf;
    sd.u.strct.nconforms = 1;
    NB_EXPECT(nb_type_is_differentiable(s) && nb_type_differential(&t, s) == s);
    for (int i = 0; i < t.count; i++) NB_EXPECT(t.types[i]->id == i);
    nb_types_free(&t);
    nb_arena_destroy(&a);
}

static void test_queries(void) {
    nb_arena a;
    nb_arena_init(&a, 0);
    nb_type_table t;
    nb_types_init(&t, &a);
    const nb_type *f3 = nb_type_vector(&t, NB_SC_FLOAT, 3), *i3 = nb_type_vector(&t, NB_SC_INT, 3);
    NB_EXPECT(nb_type_is_numeric(i3) && !nb_type_is_numeric(t.t_bool) && nb_type_is_float_based(f3) && !nb_type_is_float_based(i3));
    NB_EXPECT(nb_type_differential(&t, i3) == NULL && nb_type_differential(&t, f3) == f3);
    const nb_type *arr = nb_type_array(&t, f3, 4);
    NB_EXPECT(nb_type_differential(&t, arr) == arr && nb_type_is_differentiable(arr));
    long long d[8];
    NB_EXPECT(nb_type_value_shape(t.t_float, d) == 0);
    NB_EXPECT(nb_type_value_shape(f3, d) == 1 && d[0] == 3);
    NB_EXPECT(nb_type_value_shape(nb_type_matrix(&t, NB_SC_FLOAT, 3, 4), d) == 2 && d[0] == 3 && d[1] == 4);
    NB_EXPECT(nb_type_value_shape(nb_type_array(&t, t.t_float, 4), d) == 1 && d[0] == 4);
    NB_EXPECT(nb_type_value_shape(arr, d) == 2 && d[0] == 4 && d[1] == 3);
    NB_EXPECT(nb_type_value_shape(nb_type_tensor(&t, t.t_float, 1, 0), d) == -1);
    /* conversion costs */
    NB_EXPECT(nb_check_conversion_cost(t.t_float, t.t_float) == 0);
    NB_EXPECT(nb_check_conversion_cost(t.t_int, t.t_float) > 0);
    NB_EXPECT(nb_check_conversion_cost(t.t_int, t.t_float) < nb_check_conversion_cost(t.t_int, t.t_double));
    NB_EXPECT(nb_check_conversion_cost(t.t_float, t.t_double) < nb_check_conversion_cost(t.t_float, t.t_int));
    NB_EXPECT(nb_check_conversion_cost(t.t_float, f3) > 0);
    NB_EXPECT(nb_check_conversion_cost(f3, t.t_float) < 0);
    NB_EXPECT(nb_check_conversion_cost(f3, nb_type_vector(&t, NB_SC_FLOAT, 2)) < 0);
    NB_EXPECT(nb_check_conversion_cost(i3, f3) > 0);
    NB_EXPECT(nb_check_conversion_cost(t.t_error, f3) == 0 && nb_check_conversion_cost(f3, t.t_error) == 0);
    NB_EXPECT(nb_check_conversion_cost(arr, nb_type_array(&t, t.t_float, 4)) < 0);
    nb_types_free(&t);
    nb_arena_destroy(&a);
}

int main(int argc, char **argv) {
    NB_TEST_MAIN(argc, argv, test_interning_and_names, test_queries);
}
