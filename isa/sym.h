/* sym.h: shape variables and the size expressions built from them.
 *
 * A dimension (or an entry of an integer-list attribute) is either a
 * number or a symbolic size. A symbolic size is stored in the same int64
 * slot as ISA_SYM_BASE + id, where id names a canonical polynomial in a
 * table: a sum of terms, each an integer coefficient times a product of
 * atoms, where an atom is a shape variable or an opaque floor division
 * (expr // c) that did not divide exactly. Polynomials are normalised
 * (terms sorted and merged) and interned, so two sizes that the algebra
 * can show equal have the same id, and `==` on the encoded values decides
 * equality. A polynomial that is a plain number is stored as that number,
 * never as an id. Sizes are evaluated from the variables' values bound at
 * invoke, and bounded (for memory planning) from their declared ranges.
 */
#ifndef RILL_ISA_SYM_H
#define RILL_ISA_SYM_H

#include "base.h"

#define ISA_SYM_BASE INT64_MIN
#define ISA_SYM_MAX_IDS 0x7fffffff
#define ISA_SYM_MAX_DEG 8     /* atoms in one term */
#define ISA_SYM_MAX_TERMS 256 /* terms in one expression (an SSD head concatenates 90 counts) */
#define ISA_SYM_UNBOUNDED INT64_MAX

static inline bool isa_dim_is_sym(int64_t d) { return d < 0 && (uint64_t)(d - ISA_SYM_BASE) <= ISA_SYM_MAX_IDS; }
static inline uint32_t isa_sym_id(int64_t d) { return (uint32_t)(d - ISA_SYM_BASE); }

typedef struct isa_symvar {
  const char *name;
  int64_t lo, hi;            /* declared range; hi ISA_SYM_UNBOUNDED when undeclared (lo 1) */
  bool declared;
  bool runtime;              /* bound by bind_dims: sizes over it are checked when it is bound, not before */
  uint32_t line, col;        /* of the declaration, 0 when none */
} isa_symvar_t;

typedef struct isa_symterm {
  int64_t coef;
  uint32_t natoms;
  uint32_t atoms[ISA_SYM_MAX_DEG]; /* sorted; atom index into the atom table */
} isa_symterm_t;

typedef struct isa_symatom {
  bool is_div;               /* false: variable `var`; true: num // div */
  uint32_t var;
  int64_t num, div;          /* num: an encoded size (symbolic), div > 1 */
} isa_symatom_t;

typedef struct isa_symexpr {
  uint32_t nterms;
  isa_symterm_t *terms;      /* sorted, merged, no zero coefficients */
} isa_symexpr_t;

typedef struct isa_syms {
  const rill_allocator_t *a;
  rill_arena_t arena;
  RILL_VEC(isa_symvar_t) vars;
  RILL_VEC(isa_symatom_t) atoms;
  RILL_VEC(isa_symexpr_t) exprs;
  rill_map_t expr_map, atom_map, var_map;
} isa_syms_t;

void isa_syms_init(isa_syms_t *s, const rill_allocator_t *a);
void isa_syms_free(isa_syms_t *s);

/* Copies src's tables into dst (initialised, empty). */
rill_status_t isa_syms_copy(isa_syms_t *dst, const isa_syms_t *src);

/* The tables a module file holds: only the expressions reachable from
 * `roots` (encoded sizes), numbered by a canonical order that does not
 * depend on the order they were made in (variables by name; expressions by
 * division depth, then by their text with terms and factors sorted), so
 * equal modules write equal bytes. *out_map (malloc'd, one per expression
 * of s) gives each reachable expression's new id, UINT32_MAX elsewhere. */
rill_status_t isa_syms_canonical(const isa_syms_t *s, const int64_t *roots, size_t nroots, isa_syms_t *out,
                                 uint32_t **out_map);

/* The variable NAME (created unbounded, 1 and up, when new); its index. */
rill_status_t isa_syms_var(isa_syms_t *s, const char *name, size_t len, uint32_t *out_index);
/* The size that stands for variable `index`. */
rill_status_t isa_syms_var_dim(isa_syms_t *s, uint32_t index, int64_t *out);
int32_t isa_syms_find_var(const isa_syms_t *s, const char *name, size_t len);

/* Size arithmetic over numbers and symbolic sizes. Errors: out of memory,
 * overflow of a coefficient, or a term of too high a degree. */
rill_status_t isa_sym_add(isa_syms_t *s, int64_t a, int64_t b, int64_t *out);
rill_status_t isa_sym_sub(isa_syms_t *s, int64_t a, int64_t b, int64_t *out);
rill_status_t isa_sym_mul(isa_syms_t *s, int64_t a, int64_t b, int64_t *out);
/* floor(a / c) for a number c > 0. */
rill_status_t isa_sym_floordiv(isa_syms_t *s, int64_t a, int64_t c, int64_t *out);
/* a / b when b divides a exactly as polynomials (b a single term); false when it cannot be shown. */
bool isa_sym_divexact(isa_syms_t *s, int64_t a, int64_t b, int64_t *out, rill_status_t *out_err);

/* Interval of a size over the variables' ranges (saturating: INT64_MAX
 * where a variable is unbounded); false on a malformed size. */
/* Whether size d names a variable bound at run time (isa_symvar_t.runtime). */
bool isa_sym_runtime(const isa_syms_t *s, int64_t d);
bool isa_sym_bounds(const isa_syms_t *s, int64_t d, int64_t *out_lo, int64_t *out_hi);
/* The value of a size with variable i bound to vals[i]; false on overflow or a negative size. */
bool isa_sym_eval(const isa_syms_t *s, int64_t d, const int64_t *vals, int64_t *out);
/* The same for an amount that may be negative (pad's pads: a crop); false on overflow. */
bool isa_sym_eval_signed(const isa_syms_t *s, int64_t d, const int64_t *vals, int64_t *out);

/* Text of a size (`B*20+3`, `(S+1)//2`), NUL-terminated, truncated to size. */
char *isa_sym_format(const isa_syms_t *s, int64_t d, char *buf, size_t size);
/* A size in the lowered form's notation, which the assembler reads back:
 * a number, a name, add(x, y, ...), mul(x, y, ...) or floordiv(x, c). */
rill_status_t isa_sym_print_lowered(rill_buf_t *b, const isa_syms_t *s, int64_t d);

/* A type with symbolic dimensions by name. */
char *isa_sym_format_type(const isa_syms_t *s, const rill_type_t *t, char *buf, size_t size);
bool isa_type_is_sym(const rill_type_t *t);

/* Numel and bytes of a type whose dimensions may be symbolic. */
rill_status_t isa_sym_numel(isa_syms_t *s, const rill_type_t *t, int64_t *out);
/* Largest bytes of a type over the ranges; false when unbounded or too large. */
bool isa_sym_type_max_bytes(const isa_syms_t *s, const rill_type_t *t, size_t *out);

#endif
