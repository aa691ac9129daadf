/* lexer.c: .vmasm text to tokens, and the assembler's diagnostics.
 *
 * Newlines end statements (a statement is one line, so an unclosed bracket is
 * reported on its own line). Numbers keep both their integer and float
 * readings; `inf`, `nan` and `true`/`false` are numbers too.
 */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "asm.h"

static rill_status_t verror(const asm_ctx_t *c, uint32_t line, uint32_t col, const char *fmt, va_list ap) RILL_PRINTF(4, 0);
static rill_status_t verror(const asm_ctx_t *c, uint32_t line, uint32_t col, const char *fmt, va_list ap) {
  /* the message may echo the source's strings (and a stray byte): escaped
   * whole, as the assembler's own text needs no escapes */
  char msg[1024], esc[2048];
  vsnprintf(msg, sizeof msg, fmt, ap);
  rill_escape(msg, strlen(msg), esc, sizeof esc);
  return rill__status(RILL_ASSEMBLY_ERROR, "%s:%u:%u: error: %s", c->path, line, col, esc);
}

rill_status_t asm_error(const asm_ctx_t *c, uint32_t line, uint32_t col, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  rill_status_t s = verror(c, line, col, fmt, ap);
  va_end(ap);
  return s;
}

rill_status_t asm_error_at(const asm_ctx_t *c, const token_t *t, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  rill_status_t s = verror(c, t->line, t->col, fmt, ap);
  va_end(ap);
  return s;
}

int64_t asm_tok_digits(const token_t *t) {
  if (t->len == 0 || t->len > 9) return -1;
  int64_t v = 0;
  for (uint32_t i = 0; i < t->len; i++) {
    if (!isdigit((unsigned char)t->text[i])) return -1;
    v = v * 10 + (t->text[i] - '0');
  }
  return v;
}

const char *asm_tok_desc(const token_t *t, char *buf, size_t n) {
  switch (t->kind) {
    case T_EOF: return "end of file";
    case T_NEWLINE: return "end of line";
    case T_STRING: return "a string";
    case T_VALUE: snprintf(buf, n, "'%%%.*s'", (int)(t->len < 40 ? t->len : 40), t->text); return buf;
    case T_FUNC: snprintf(buf, n, "'@%.*s'", (int)(t->len < 40 ? t->len : 40), t->text); return buf;
    case T_OPREF: snprintf(buf, n, "'$%.*s'", (int)(t->len < 40 ? t->len : 40), t->text); return buf;
    default: snprintf(buf, n, "'%.*s'", (int)(t->len < 40 ? t->len : 40), t->text); return buf;
  }
}

static bool name_start(int ch) { return isalpha(ch) || ch == '_'; }
static bool name_char(int ch) { return isalnum(ch) || ch == '_' || ch == '.'; }

typedef RILL_VEC(token_t) tokvec_t;

static rill_status_t push(asm_ctx_t *c, tokvec_t *v, token_t t) {
  return RILL_VEC_PUSH(c->a, v, t);
}

rill_status_t asm_lex(asm_ctx_t *c) {
  tokvec_t v = {0};
  const char *s = c->src, *end = c->src + c->src_len;
  uint32_t line = 1;
  const char *line_start = s;
  rill_status_t st = NULL;
#define COL() ((uint32_t)(p - line_start) + 1)
  const char *p = s;
  while (p < end) {
    char ch = *p;
    token_t t;
    memset(&t, 0, sizeof t);
    t.line = line;
    t.col = COL();
    t.text = p;
    if (ch == '\n') {
      if ((st = push(c, &v, (token_t){.kind = T_NEWLINE, .line = line, .col = COL(), .text = p, .len = 1}))) goto fail;
      line++;
      p++;
      line_start = p;
      continue;
    }
    if (ch == ' ' || ch == '\t' || ch == '\r') { p++; continue; }
    if (ch == '#') {
      while (p < end && *p != '\n') p++;
      continue;
    }
    if (ch == 0) { st = asm_error(c, line, COL(), "NUL byte in the source"); goto fail; }
    if (ch == '%' || ch == '@' || ch == '$') {
      t.kind = ch == '%' ? T_VALUE : ch == '@' ? T_FUNC : T_OPREF;
      const char *q = ++p;
      if (q < end && isdigit((unsigned char)*q)) {
        while (q < end && isdigit((unsigned char)*q)) q++;
        if (q < end && name_char((unsigned char)*q)) {
          st = asm_error(c, line, t.col, "bad name: a name is all digits or starts with a letter or '_'");
          goto fail;
        }
      } else if (q < end && name_start((unsigned char)*q) && ch != '$') {
        while (q < end && name_char((unsigned char)*q)) q++;
      } else {
        st = asm_error(c, line, t.col, "expected a name after '%c'", ch);
        goto fail;
      }
      t.text = p;
      t.len = (uint32_t)(q - p);
      p = q;
    } else if (isdigit((unsigned char)ch) || ((ch == '-' || ch == '+') && p + 1 < end && (isdigit((unsigned char)p[1]) || p[1] == '.' || (end - p >= 4 && memcmp(p + 1, "inf", 3) == 0))) ||
               (ch == '.' && p + 1 < end && isdigit((unsigned char)p[1]))) {
      const char *q = p;
      if (*q == '-' || *q == '+') q++;
      if (end - q >= 3 && memcmp(q, "inf", 3) == 0 && !(q + 3 < end && name_char((unsigned char)q[3]))) {
        t.kind = T_NUMBER;
        t.is_float = true;
        t.f = *p == '-' ? -INFINITY : INFINITY;
        t.len = (uint32_t)(q + 3 - p);
        p = q + 3;
      } else {
        bool fl = false;
        while (q < end && isdigit((unsigned char)*q)) q++;
        if (q < end && *q == '.') { fl = true; q++; while (q < end && isdigit((unsigned char)*q)) q++; }
        if (q < end && (*q == 'e' || *q == 'E')) {
          const char *e = q + 1;
          if (e < end && (*e == '-' || *e == '+')) e++;
          if (e < end && isdigit((unsigned char)*e)) {
            fl = true;
            q = e;
            while (q < end && isdigit((unsigned char)*q)) q++;
          }
        }
        if (q < end && (name_char((unsigned char)*q))) {
          st = asm_error(c, line, t.col, "malformed number '%.*s'", (int)(q - p + 1), p);
          goto fail;
        }
        char buf[128];
        size_t n = (size_t)(q - p);
        if (n >= sizeof buf) { st = asm_error(c, line, t.col, "number too long"); goto fail; }
        memcpy(buf, p, n);
        buf[n] = 0;
        t.kind = T_NUMBER;
        t.is_float = fl;
        errno = 0;
        t.f = strtod(buf, NULL);
        if (!fl) {
          errno = 0;
          t.i = strtoll(buf, NULL, 10);
          if (errno == ERANGE && buf[0] != '-') { /* up to 2^64 - 1: a u64 literal */
            errno = 0;
            t.u = strtoull(buf, NULL, 10);
            t.is_big = errno != ERANGE;
          }
          if (errno == ERANGE) { st = asm_error(c, line, t.col, "integer %s out of the 64-bit range", buf); goto fail; }
        }
        t.len = (uint32_t)n;
        p = q;
      }
    } else if (name_start((unsigned char)ch)) {
      const char *q = p;
      while (q < end && name_char((unsigned char)*q)) q++;
      t.kind = T_NAME;
      t.len = (uint32_t)(q - p);
      p = q;
      if ((t.len == 3 && memcmp(t.text, "inf", 3) == 0) || (t.len == 3 && memcmp(t.text, "nan", 3) == 0)) {
        t.kind = T_NUMBER;
        t.is_float = true;
        t.f = t.text[0] == 'i' ? INFINITY : NAN;
      } else if ((t.len == 4 && memcmp(t.text, "true", 4) == 0) || (t.len == 5 && memcmp(t.text, "false", 5) == 0)) {
        t.kind = T_NUMBER;
        t.is_bool = true;
        t.i = t.len == 4;
        t.f = (double)t.i;
      }
    } else if (ch == '"') {
      rill_buf_t b;
      rill__buf_init(&b, c->a);
      const char *q = p + 1;
      for (;;) {
        if (q >= end || *q == '\n') { rill__buf_free(&b); st = asm_error(c, line, t.col, "unterminated string"); goto fail; }
        if (*q == '"') break;
        char out = *q;
        if (*q == '\\') {
          q++;
          if (q >= end) continue;
          if (*q == 'n') out = '\n';
          else if (*q == '"' || *q == '\\') out = *q;
          else { rill__buf_free(&b); st = asm_error(c, line, (uint32_t)(q - line_start), "unknown escape '\\%c' (expected \\\", \\\\ or \\n)", *q); goto fail; }
        } else if (*q == 0) {
          rill__buf_free(&b);
          st = asm_error(c, line, (uint32_t)(q - line_start) + 1, "NUL byte in a string");
          goto fail;
        }
        if ((st = rill__buf_append(&b, &out, 1))) { rill__buf_free(&b); goto fail; }
        q++;
      }
      t.kind = T_STRING;
      t.str = rill__arena_strndup(&c->arena, b.data ? (const char *)b.data : "", b.len);
      rill__buf_free(&b);
      if (!t.str) { st = rill__oom(); goto fail; }
      t.len = (uint32_t)(q + 1 - p);
      p = q + 1;
    } else {
      t.len = 1;
      switch (ch) {
        case '(': t.kind = T_LPAREN; break;
        case ')': t.kind = T_RPAREN; break;
        case '[': t.kind = T_LBRACK; break;
        case ']': t.kind = T_RBRACK; break;
        case '{': t.kind = T_LBRACE; break;
        case '}': t.kind = T_RBRACE; break;
        case ',': t.kind = T_COMMA; break;
        case ':': t.kind = T_COLON; break;
        case '=': t.kind = T_EQ; break;
        case '-':
          if (p + 1 < end && p[1] == '>') { t.kind = T_ARROW; t.len = 2; break; }
          /* fall through */
        default:
          if ((unsigned char)ch >= 0x20 && (unsigned char)ch < 0x7f)
            st = asm_error(c, line, t.col, "unexpected character '%c'", ch);
          else
            st = asm_error(c, line, t.col, "unexpected byte 0x%02x", (unsigned char)ch);
          goto fail;
      }
      p += t.len;
    }
    if ((st = push(c, &v, t))) goto fail;
  }
  if ((st = push(c, &v, (token_t){.kind = T_NEWLINE, .line = line, .col = COL(), .text = p})) ||
      (st = push(c, &v, (token_t){.kind = T_EOF, .line = line, .col = COL(), .text = p})))
    goto fail;
#undef COL
  c->toks = v.items;
  c->ntoks = v.len;
  return NULL;
fail:
  RILL_VEC_FREE(c->a, &v);
  return st;
}
