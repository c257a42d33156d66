/* Slang array conveniences: `int a[] = { 1, 2, 3 };` takes its length from the initializer
 * list, and `a.getCount()` is the (constant) length of an array.
 */
#include <string.h>

#include "lang/check_internal.h"

void ck_infer_array_size(nb_checker *c, nb_type_expr *te, nb_expr *init) {
    if (!te || te->narray_dims < 1 || !te->array_dims || te->array_dims[0] || !init ||
        init->kind != NB_EX_INIT_LIST)
        return;
    nb_expr *n = ck_new_expr(c, NB_EX_INT, te->loc);
    if (!n) return;
    n->u.ilit.value = (uint64_t)init->u.init_list.nitems;
    te->array_dims[0] = n;
}

const nb_type *ck_array_get_count(nb_checker *c, nb_expr **slot, const nb_type *at) {
    nb_expr *call = *slot;
    if (call->u.call.nargs != 0) {
        ck_err(c, call->loc, "'getCount' takes no arguments");
        return call->type = c->tt->t_error;
    }
    nb_expr *n = ck_new_expr(c, NB_EX_INT, call->loc);
    if (!n) return call->type = c->tt->t_error;
    n->u.ilit.value = (uint64_t)at->length;
    *slot = n;
    return ck_expr(c, slot);
}
