/* Interned types of the kernel language (see types.h). A table holds every type made in one
 * compilation; constructors search it first, so equal types are the same pointer. Types live in
 * the table's arena; the index array is on the heap (nb_types_free). */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "lang/ast.h"
#include "lang/types.h"
#include "nabla/alloc.h"

static const char *const g_scalar_names[] = {"bool", "int", "uint", "int64_t", "uint64_t",
                                             "half", "float", "double"};

const char *nb_scalar_name(nb_scalar_kind s) {
    if ((int)s < 0 || (int)s >= (int)(sizeof g_scalar_names / sizeof g_scalar_names[0])) return "?";
    return g_scalar_names[s];
}

static uint64_t type_key_hash(const nb_type *p) {
    uint64_t h = 1469598103934665603ull;
    uint64_t parts[9] = {(uint64_t)p->kind,   (uint64_t)p->scalar, (uint64_t)p->rows,
                         (uint64_t)p->cols,   (uint64_t)p->length, (uint64_t)(uintptr_t)p->elem,
                         (uint64_t)p->rank,   (uint64_t)p->diff_tensor | (uint64_t)p->buffer << 8, (uint64_t)(uintptr_t)p->decl};
    for (int i = 0; i < 9; i++) {
        h ^= parts[i];
        h *= 0x9E3779B97F4A7C15ull;
        h ^= h >> 29;
    }
    return h;
}

static int same_key(const nb_type *q, const nb_type *p) {
    return q->kind == p->kind && q->scalar == p->scalar && q->rows == p->rows && q->cols == p->cols &&
           q->length == p->length && q->elem == p->elem && q->rank == p->rank && q->diff_tensor == p->diff_tensor &&
           q->buffer == p->buffer &&
           q->decl == p->decl;
}

/* The hash slot of proto's type, or of the empty slot where it would go. */
static int *hash_slot(const nb_type_table *t, const nb_type *proto) {
    size_t m = (size_t)t->hcap - 1;
    for (size_t i = (size_t)type_key_hash(proto) & m;; i = (i + 1) & m)
        if (!t->hslots[i] || same_key(t->types[t->hslots[i] - 1], proto)) return &t->hslots[i];
}

/* Keeps the hash index at most half full; 0 when out of memory. */
static int hash_grow(nb_type_table *t) {
    if ((t->count + 1) * 2 <= t->hcap) return 1;
    int ncap = t->hcap ? t->hcap * 2 : 256;
    int *n = nb_alloc(sizeof(int) * (size_t)ncap, _Alignof(int));
    if (!n) return 0;
    memset(n, 0, sizeof(int) * (size_t)ncap);
    nb_free(t->hslots, sizeof(int) * (size_t)t->hcap);
    t->hslots = n;
    t->hcap = ncap;
    for (int k = 0; k < t->count; k++) *hash_slot(t, t->types[k]) = k + 1;
    return 1;
}

/* Adds a new type (copied from proto) with its name. Returns t_error's fallback on OOM. */
static const nb_type *add_type(nb_type_table *t, const nb_type *proto) {
    if (!hash_grow(t)) return t->t_error;
    if (t->count == t->cap) {
        int ncap = t->cap ? t->cap * 2 : 64;
        nb_type **n = nb_alloc(sizeof(nb_type *) * (size_t)ncap, _Alignof(nb_type *));
        if (!n) return t->t_error;
        if (t->types) memcpy(n, t->types, sizeof(nb_type *) * (size_t)t->count);
        nb_free(t->types, sizeof(nb_type *) * (size_t)t->cap);
        t->types = n;
        t->cap = ncap;
    }
    nb_type *ty = nb_arena_zalloc(t->arena, sizeof *ty, _Alignof(nb_type));
    if (!ty) return t->t_error;
    *ty = *proto;
    ty->id = t->count;
    nb_strbuf sb;
    nb_strbuf_init(&sb);
    nb_type_print(ty, &sb);
    ty->name = nb_arena_strdup(t->arena, nb_strbuf_cstr(&sb));
    nb_strbuf_free(&sb);
    if (!ty->name) ty->name = "?";
    t->types[t->count++] = ty;
    *hash_slot(t, ty) = t->count;
    return ty;
}

static const nb_type *find_or_add(nb_type_table *t, const nb_type *proto) {
    if (t->hcap) {
        int k = *hash_slot(t, proto);
        if (k) return t->types[k - 1];
    }
    return add_type(t, proto);
}

void nb_types_init(nb_type_table *t, nb_arena *arena) {
    memset(t, 0, sizeof *t);
    t->arena = arena;
    nb_type proto;
    memset(&proto, 0, sizeof proto);
    proto.kind = NB_TY_ERROR;
    /* t_error must exist before anything can fail; make it by hand. */
    static nb_type g_oom_error = {NB_TY_ERROR, -1, NB_SC_FLOAT, 0, 0, 0, NULL, 0, 0, NULL, "<error>", 0, NULL};
    t->t_error = &g_oom_error;
    t->t_error = find_or_add(t, &proto);
    proto.kind = NB_TY_VOID;
    t->t_void = find_or_add(t, &proto);
    t->t_bool = nb_type_scalar(t, NB_SC_BOOL);
    t->t_int = nb_type_scalar(t, NB_SC_INT);
    t->t_uint = nb_type_scalar(t, NB_SC_UINT);
    t->t_float = nb_type_scalar(t, NB_SC_FLOAT);
    t->t_double = nb_type_scalar(t, NB_SC_DOUBLE);
    t->t_half = nb_type_scalar(t, NB_SC_HALF);
}

void nb_types_free(nb_type_table *t) {
    nb_free(t->types, sizeof(nb_type *) * (size_t)t->cap);
    t->types = NULL;
    t->count = t->cap = 0;
    nb_free(t->hslots, sizeof(int) * (size_t)t->hcap);
    t->hslots = NULL;
    t->hcap = 0;
}

const nb_type *nb_type_scalar(nb_type_table *t, nb_scalar_kind s) {
    nb_type p;
    memset(&p, 0, sizeof p);
    p.kind = NB_TY_SCALAR;
    p.scalar = s;
    p.rows = p.cols = 1;
    return find_or_add(t, &p);
}

const nb_type *nb_type_vector(nb_type_table *t, nb_scalar_kind s, int n) {
    if (n == 1) return nb_type_scalar(t, s);
    if (n < 2 || n > 4) return t->t_error;
    nb_type p;
    memset(&p, 0, sizeof p);
    p.kind = NB_TY_VECTOR;
    p.scalar = s;
    p.rows = 1;
    p.cols = n;
    return find_or_add(t, &p);
}

const nb_type *nb_type_matrix(nb_type_table *t, nb_scalar_kind s, int rows, int cols) {
    if (rows < 1 || rows > NB_MATRIX_MAX_ROWS || cols < 1 || cols > 4) return t->t_error;
    nb_type p;
    memset(&p, 0, sizeof p);
    p.kind = NB_TY_MATRIX;
    p.scalar = s;
    p.rows = rows;
    p.cols = cols;
    return find_or_add(t, &p);
}

const nb_type *nb_type_array(nb_type_table *t, const nb_type *elem, int length) {
    if (!elem || elem->kind == NB_TY_ERROR || length < 0) return t->t_error;
    nb_type p;
    memset(&p, 0, sizeof p);
    p.kind = NB_TY_ARRAY;
    p.elem = elem;
    p.length = length;
    p.scalar = elem->scalar;
    return find_or_add(t, &p);
}

const nb_type *nb_type_struct(nb_type_table *t, struct nb_decl *decl) {
    nb_type p;
    memset(&p, 0, sizeof p);
    p.kind = NB_TY_STRUCT;
    p.decl = decl;
    return find_or_add(t, &p);
}

const nb_type *nb_type_tensor(nb_type_table *t, const nb_type *elem, int rank, int diff) {
    if (!elem || elem->kind == NB_TY_ERROR || rank < 1 || rank > 8) return t->t_error;
    nb_type p;
    memset(&p, 0, sizeof p);
    p.kind = NB_TY_TENSOR;
    p.elem = elem;
    p.rank = rank;
    p.diff_tensor = diff ? 1 : 0;
    p.scalar = elem->scalar;
    return find_or_add(t, &p);
}

const nb_type *nb_type_torch(nb_type_table *t, const nb_type *elem) {
    if (!elem || (elem->kind != NB_TY_SCALAR && elem->kind != NB_TY_VECTOR)) return t->t_error;
    nb_type p;
    memset(&p, 0, sizeof p);
    p.kind = NB_TY_TORCH;
    p.elem = elem;
    p.scalar = elem->scalar;
    return find_or_add(t, &p);
}

const nb_type *nb_type_buffer(nb_type_table *t, const nb_type *elem, int kind) {
    if (!elem || elem->kind == NB_TY_ERROR) return t->t_error;
    nb_type p;
    memset(&p, 0, sizeof p);
    p.kind = NB_TY_TENSOR;
    p.elem = elem;
    p.rank = 1;
    p.buffer = kind;
    p.scalar = elem->scalar;
    return find_or_add(t, &p);
}

const nb_type *nb_type_diffpair(nb_type_table *t, const nb_type *primal) {
    if (!primal || primal->kind == NB_TY_ERROR) return t->t_error;
    nb_type p;
    memset(&p, 0, sizeof p);
    p.kind = NB_TY_DIFFPAIR;
    p.elem = primal;
    p.scalar = primal->scalar;
    return find_or_add(t, &p);
}

const nb_type *nb_type_ptr(nb_type_table *t, const nb_type *elem) {
    if (!elem || elem->kind == NB_TY_ERROR) return t->t_error;
    nb_type p;
    memset(&p, 0, sizeof p);
    p.kind = NB_TY_PTR;
    p.elem = elem;
    return find_or_add(t, &p);
}

const nb_type *nb_type_func(nb_type_table *t, struct nb_decl *fn) {
    nb_type p;
    memset(&p, 0, sizeof p);
    p.kind = NB_TY_FUNC;
    p.decl = fn;
    return find_or_add(t, &p);
}

/* ---- queries ------------------------------------------------------------------------------ */

static int scalar_is_float(nb_scalar_kind s) {
    return s == NB_SC_HALF || s == NB_SC_FLOAT || s == NB_SC_DOUBLE;
}

int nb_type_is_numeric(const nb_type *t) {
    if (!t) return 0;
    if (t->kind != NB_TY_SCALAR && t->kind != NB_TY_VECTOR && t->kind != NB_TY_MATRIX) return 0;
    return t->scalar != NB_SC_BOOL;
}

int nb_type_is_float_based(const nb_type *t) {
    if (!t) return 0;
    if (t->kind != NB_TY_SCALAR && t->kind != NB_TY_VECTOR && t->kind != NB_TY_MATRIX) return 0;
    return scalar_is_float(t->scalar);
}

static int struct_is_idiff(const nb_type *t) {
    const nb_decl *d = t->decl;
    if (!d || d->kind != NB_DECL_STRUCT) return 0;
    if (d->u.strct.idiff) return 1;
    for (int i = 0; i < d->u.strct.nconforms; i++)
        if (d->u.strct.conforms[i] && strcmp(d->u.strct.conforms[i], "IDifferentiable") == 0)
            return 1;
    return 0;
}

const nb_type *nb_type_ptr_pair(const nb_type *t) {
    if (t && t->kind == NB_TY_ARRAY) return t->ptr_pair;
    const nb_decl *d = t && t->kind == NB_TY_STRUCT ? t->decl : NULL;
    return d && d->kind == NB_DECL_STRUCT && d->u.strct.ptr_pair ? d->u.strct.ptr_pair->u.strct.type : NULL;
}

int nb_type_is_differentiable(const nb_type *t) {
    if (!t) return 0;
    switch (t->kind) {
    case NB_TY_SCALAR:
    case NB_TY_VECTOR:
    case NB_TY_MATRIX: return nb_type_is_float_based(t);
    case NB_TY_ARRAY: return nb_type_is_differentiable(t->elem);
    case NB_TY_STRUCT: return struct_is_idiff(t);
    case NB_TY_DIFFPAIR: return 1;
    default: return 0;
    }
}

nb_scalar_kind nb_type_elem_scalar(const nb_type *t) {
    return t ? t->scalar : NB_SC_FLOAT;
}

int nb_type_components(const nb_type *t) {
    if (!t) return 0;
    switch (t->kind) {
    case NB_TY_SCALAR: return 1;
    case NB_TY_VECTOR: return t->cols;
    case NB_TY_MATRIX: return t->rows * t->cols;
    default: return 0;
    }
}

const nb_type *nb_type_differential(nb_type_table *tt, const nb_type *ty) {
    if (!ty) return NULL;
    switch (ty->kind) {
    case NB_TY_SCALAR:
    case NB_TY_VECTOR:
    case NB_TY_MATRIX: return nb_type_is_float_based(ty) ? ty : NULL;
    case NB_TY_ARRAY: {
        const nb_type *e = nb_type_differential(tt, ty->elem);
        return e ? nb_type_array(tt, e, ty->length) : NULL;
    }
    case NB_TY_STRUCT: {
        if (!struct_is_idiff(ty)) return NULL;
        /* `typealias Differential = D;` inside the struct (resolved by the checker) */
        const nb_decl *d = ty->decl;
        for (int i = 0; d && i < d->u.strct.ntypes; i++) {
            const nb_decl *td = d->u.strct.types[i];
            if (td && td->name && strcmp(td->name, "Differential") == 0 && td->u.tdef.texpr &&
                td->u.tdef.texpr->resolved && td->u.tdef.texpr->resolved->kind != NB_TY_ERROR)
                return td->u.tdef.texpr->resolved;
        }
        return ty;
    }
    case NB_TY_DIFFPAIR: {
        const nb_type *e = nb_type_differential(tt, ty->elem);
        return e ? nb_type_diffpair(tt, e) : NULL;
    }
    case NB_TY_ERROR: return ty;
    default: return NULL;
    }
}

int nb_type_value_shape(const nb_type *t, long long *dims) {
    if (!t) return -1;
    switch (t->kind) {
    case NB_TY_SCALAR: return 0;
    case NB_TY_VECTOR: dims[0] = t->cols; return 1;
    case NB_TY_MATRIX: dims[0] = t->rows; dims[1] = t->cols; return 2;
    case NB_TY_ARRAY: {
        long long inner[8];
        int r = nb_type_value_shape(t->elem, inner);
        if (r < 0 || r + 1 > 8) return -1;
        dims[0] = t->length;
        for (int i = 0; i < r; i++) dims[i + 1] = inner[i];
        return r + 1;
    }
    default: return -1; /* structs are flattened into leaves; tensors are bound whole */
    }
}

static void print_array_dims(const nb_type *t, nb_strbuf *out) {
    for (; t && t->kind == NB_TY_ARRAY; t = t->elem) nb_strbuf_printf(out, "[%d]", t->length);
}

void nb_type_print(const nb_type *t, nb_strbuf *out) {
    if (!t) { nb_strbuf_append(out, "<null>"); return; }
    switch (t->kind) {
    case NB_TY_ERROR: nb_strbuf_append(out, "<error>"); break;
    case NB_TY_VOID: nb_strbuf_append(out, "void"); break;
    case NB_TY_SCALAR: nb_strbuf_append(out, nb_scalar_name(t->scalar)); break;
    case NB_TY_VECTOR: nb_strbuf_printf(out, "%s%d", nb_scalar_name(t->scalar), t->cols); break;
    case NB_TY_MATRIX:
        if (t->rows > 4) /* no floatNxM spelling past 4 rows: Slang's own */
            nb_strbuf_printf(out, "matrix<%s,%d,%d>", nb_scalar_name(t->scalar), t->rows, t->cols);
        else nb_strbuf_printf(out, "%s%dx%d", nb_scalar_name(t->scalar), t->rows, t->cols);
        break;
    case NB_TY_ARRAY: {
        const nb_type *base = t;
        while (base->kind == NB_TY_ARRAY && base->elem) base = base->elem;
        nb_type_print(base, out);
        print_array_dims(t, out);
        break;
    }
    case NB_TY_STRUCT:
        nb_strbuf_append(out, t->decl && t->decl->name ? t->decl->name : "<struct>");
        break;
    case NB_TY_TENSOR:
        if (t->buffer) {
            nb_strbuf_append(out, t->buffer == 1 ? "RWStructuredBuffer<" : "StructuredBuffer<");
            nb_type_print(t->elem, out);
            nb_strbuf_append(out, ">");
            break;
        }
        nb_strbuf_append(out, t->diff_tensor ? "DiffTensor<" : "Tensor<");
        nb_type_print(t->elem, out);
        nb_strbuf_printf(out, ",%d>", t->rank);
        break;
    case NB_TY_DIFFPAIR:
        nb_strbuf_append(out, "DifferentialPair<");
        nb_type_print(t->elem, out);
        nb_strbuf_append(out, ">");
        break;
    case NB_TY_FUNC:
        nb_strbuf_printf(out, "function '%s'", t->decl && t->decl->name ? t->decl->name : "?");
        break;
    case NB_TY_TORCH:
        nb_strbuf_append(out, "TorchTensor<");
        nb_type_print(t->elem, out);
        nb_strbuf_append(out, ">");
        break;
    case NB_TY_PTR:
        nb_strbuf_append(out, "Ptr<");
        nb_type_print(t->elem, out);
        nb_strbuf_append(out, ">");
        break;
    }
}
