/* IR builders for pointers (Slang Ptr<T>; see ir.h ADDR / PLOAD / PSTORE / PADD).
 *
 * A pointer access carries an access path like LOAD / STORE, applied to the pointee: `p->a[i]`
 * is one PLOAD of p with a FIELD and an INDEX step. Operands: the pointer (when the base is a
 * pointer), then the stored value (PSTORE), then the path's dynamic indices in order.
 */
#include "lang/ir.h"

nb_ir_inst *nb_ir_ptr_access(nb_ir_builder *b, nb_ir_op op, nb_ir_var *v, nb_ir_inst *ptr, const nb_ir_step *path,
                             int npath, nb_ir_inst **idx, nb_ir_inst *value)
{
    nb_type_table *tt = b->m->types;
    int nidx = 0;
    for (int i = 0; i < npath; i++) nidx += path[i].kind == NB_IR_STEP_INDEX;
    int base = (ptr ? 1 : 0) + (op == NB_IR_PSTORE ? 1 : 0);
    const nb_type *t = ptr ? (ptr->type->kind == NB_TY_PTR ? ptr->type->elem : tt->t_error) : v->type;
    nb_ir_step *p = NULL;
    if (npath) {
        p = nb_arena_alloc(&b->m->arena, sizeof *p * (size_t)npath, sizeof(void *));
        if (!p) return NULL;
    }
    int k = 0;
    for (int i = 0; i < npath; i++) {
        p[i] = path[i];
        if (p[i].kind == NB_IR_STEP_INDEX) p[i].index = base + k++;
        const nb_type *nt = nb_ir_step_type(tt, t, &p[i]);
        t = nt ? nt : tt->t_error;
        p[i].type = t;
    }
    const nb_type *rt = op == NB_IR_PLOAD ? t : op == NB_IR_ADDR ? nb_type_ptr(tt, t) : NULL;
    nb_ir_inst *in = nb_ir_new(b, op, rt, base + nidx);
    if (!in) return NULL;
    in->var = ptr ? NULL : v;
    in->path = p;
    in->npath = npath;
    int o = 0;
    if (ptr) in->ops[o++] = ptr;
    if (op == NB_IR_PSTORE) in->ops[o++] = value;
    for (int i = 0; i < nidx; i++) in->ops[o + i] = idx[i];
    return in;
}

nb_ir_inst *nb_ir_padd(nb_ir_builder *b, nb_ir_inst *ptr, nb_ir_inst *offset)
{
    nb_ir_inst *in = nb_ir_new(b, NB_IR_PADD, ptr->type, 2);
    if (!in) return NULL;
    in->ops[0] = ptr;
    in->ops[1] = offset;
    return in;
}
