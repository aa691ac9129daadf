/* onnx_module.c: the importer's files: reading a model, writing the .vmasm
 * and safetensors pair (both or neither), and importing straight into an
 * assembled module. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "files.h"
#include "isa/isa.h"
#include "onnx.h"
#ifndef RILL_ONNX_ABSENT
#include "onnx_int.h"
#endif

#ifndef RILL_ONNX_ABSENT
/* The model file mapped (read only, private): a large model's weights are
 * read where the page cache holds them, never copied into fresh memory.
 * Where it cannot be mapped (not a regular file) it is read whole. */
static double ms_since(const struct timespec *t0) {
  struct timespec t1;
  clock_gettime(CLOCK_MONOTONIC, &t1);
  return (double)(t1.tv_sec - t0->tv_sec) * 1e3 + (double)(t1.tv_nsec - t0->tv_nsec) * 1e-6;
}

static rill_status_t import_file(const char *path, const onnx_options_t *options, bool keep_parts, onnx_result_t *out) {
  memset(out, 0, sizeof *out);
  struct timespec t0;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  uint8_t *buf = NULL;
  void *map = NULL;
  size_t len = 0;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  struct stat sb;
  if (fd >= 0 && fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode) && sb.st_size > 0 && (uint64_t)sb.st_size <= ((uint64_t)1 << 40)) {
    map = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
    if (map == MAP_FAILED) map = NULL;
    else len = (size_t)sb.st_size;
  }
  if (fd >= 0) close(fd);
  if (!map) {
    rill_status_t rs = import_read_file(path, (size_t)1 << 40, &buf, &len);
    if (rs) return rs;
  }
  if (rill_timings_recording()) rill_timing_add("import/map", ms_since(&t0));
  char dir[4096];
  const char *slash = strrchr(path, '/');
  if (slash) snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
  else snprintf(dir, sizeof dir, ".");
  rill_status_t st = onnx__import(map ? map : buf, len, dir, options, keep_parts, out);
  if (!st && out->parts && map) { /* the pieces read the mapping: it goes with them */
    out->parts->map = map;
    out->parts->map_len = len;
    map = NULL;
  }
  if (map) munmap(map, len);
  free(buf);
  if (rill_timings_recording()) rill_timing_add("import", ms_since(&t0));
  if (st) {
    rill_status_t p = rill_status_new(rill_status_code(st), "%s: %s", path, rill_status_message(st));
    rill_status_free(st);
    st = p;
  }
  return st;
}

rill_status_t onnx_import_file(const char *path, const onnx_options_t *options, onnx_result_t *out) {
  return import_file(path, options, false, out);
}

rill_status_t onnx_import_file_parts(const char *path, const onnx_options_t *options, onnx_result_t *out) {
  return import_file(path, options, true, out);
}
#endif

/* data (size bytes), or, where data is NULL, the weights of r */
static rill_status_t write_atomic(const char *path, const void *data, size_t size, const onnx_result_t *r, char *tmp, size_t ntmp) {
  snprintf(tmp, ntmp, "%s.tmp.%ld", path, (long)getpid());
  FILE *f = fopen(tmp, "wb");
  if (!f) return rill_status_new(RILL_IO_ERROR, "%s: cannot write: %s", path, strerror(errno));
  bool ok = data ? fwrite(data, 1, size, f) == size : onnx_result_write_weights(r, f);
  ok = (fclose(f) == 0) && ok;
  if (!ok) {
    unlink(tmp);
    return rill_status_new(RILL_IO_ERROR, "%s: cannot write", path);
  }
  return NULL;
}

/* OUT.vmasm -> OUT.safetensors; and its file name alone, for the weights statement */
static void weights_paths(const char *vmasm, char *path, size_t n, const char **base) {
  size_t len = strlen(vmasm);
  if (len > 6 && !strcmp(vmasm + len - 6, ".vmasm")) len -= 6;
  snprintf(path, n, "%.*s.safetensors", (int)len, vmasm);
  const char *s = strrchr(path, '/');
  *base = s ? s + 1 : path;
}

rill_status_t onnx_import_to_files(const char *in, const char *out_vmasm, const onnx_options_t *options) {
  char wpath[4200], t1[4300], t2[4300];
  const char *wbase;
  weights_paths(out_vmasm, wpath, sizeof wpath, &wbase);
  onnx_options_t o = options ? *options : (onnx_options_t){0};
  o.weights_file = wbase;
  onnx_result_t r;
  rill_status_t st = onnx_import_file_parts(in, &o, &r);
  if (st) return st;
  struct timespec tw;
  clock_gettime(CLOCK_MONOTONIC, &tw);
  st = write_atomic(wpath, NULL, 0, &r, t1, sizeof t1);
  if (!st) {
    st = write_atomic(out_vmasm, r.vmasm, r.vmasm_len, NULL, t2, sizeof t2);
    if (st) unlink(t1);
  }
  if (!st) {
    if (rename(t1, wpath) != 0) {
      st = rill_status_new(RILL_IO_ERROR, "%s: cannot write: %s", wpath, strerror(errno));
      unlink(t1);
      unlink(t2);
    } else if (rename(t2, out_vmasm) != 0) {
      st = rill_status_new(RILL_IO_ERROR, "%s: cannot write: %s", out_vmasm, strerror(errno));
      unlink(t2);
      unlink(wpath);
    }
  }
  onnx_result_free(&r);
  if (rill_timings_recording()) rill_timing_add("import write", ms_since(&tw));
  return st;
}

/* Imports `in` and assembles it, the weights handed to the assembler as
 * the importer's pieces (the tensors where the model file's mapping holds
 * them; a scratch weights file only where there are no pieces): the
 * module's bytes in *out_bytes (or, with asm_options' output_file, that
 * file), or, where out_module is given, a module loaded. A module is
 * written to a scratch file (the weights written once, into its pages) and
 * loaded mapped (rill_module_load_file checks each constant where it lies),
 * so no weight is copied into fresh memory; the file is then removed (its
 * pages live while the module maps it). The weights stay embedded, not
 * linked: the assembler's passes see linked weights' data no more
 * (`merge_bias` would leave a MatMul and its bias apart), so the program is
 * the one `rill asm` makes. */
#ifndef RILL_ONNX_ABSENT
static void keep_parts(void *p) { onnx_parts_free(p); }
#endif

static rill_status_t assemble_in(const char *in, const onnx_options_t *options, const rill_asm_options_t *asm_options,
                                 uint8_t **out_bytes, size_t *out_size, rill_module_t **out_module) {
  onnx_options_t o = options ? *options : (onnx_options_t){0};
  o.weights_file = "weights.safetensors";
  if (asm_options && asm_options->no_opt) o.unfused_quant = true; /* -O0: the quantized ops as core ops */
  onnx_result_t r;
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  rill_status_t st = onnx_import_file_parts(in, &o, &r);
  if (st) return st;
  clock_gettime(CLOCK_MONOTONIC, &t1);
  if (o.import_ms) *o.import_ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-6;
  /* The assembler reads weights from a file beside the source: a private
   * folder, removed once the module holds the data. */
  const char *tmpdir = getenv("TMPDIR");
  char dir[4096], wpath[4200], src[4200], tmp[4300];
  snprintf(dir, sizeof dir, "%s/rill-onnx-XXXXXX", tmpdir && *tmpdir ? tmpdir : "/tmp");
  if (!mkdtemp(dir)) {
    onnx_result_free(&r);
    return rill_status_new(RILL_IO_ERROR, "cannot make a scratch folder in %s: %s", tmpdir && *tmpdir ? tmpdir : "/tmp", strerror(errno));
  }
  snprintf(wpath, sizeof wpath, "%s/weights.safetensors", dir);
  snprintf(src, sizeof src, "%s/model.vmasm", dir);
  rill_asm_options_t ao = asm_options ? *asm_options : (rill_asm_options_t){0};
  /* The assembler takes the weights as the importer's pieces (the header,
   * each tensor where the model file's mapping holds it), so they are
   * written once, into the module, and never to a scratch file. */
  const void **pieces = NULL;
  size_t *lens = NULL;
#ifndef RILL_ONNX_ABSENT
  if (r.parts) {
    const struct onnx_parts *p = r.parts;
    pieces = malloc(sizeof *pieces * ((size_t)p->n + 1));
    lens = malloc(sizeof *lens * ((size_t)p->n + 1));
    if (!pieces || !lens) st = rill_status_new(RILL_OUT_OF_MEMORY, "out of memory");
    for (int i = 0; !st && i <= p->n; i++) {
      pieces[i] = i ? p->ptr[i - 1] : p->head;
      lens[i] = i ? p->len[i - 1] : p->head_len;
    }
    ao.weights_path = o.weights_file;
    ao.weights_pieces = pieces;
    ao.weights_lens = lens;
    ao.weights_npieces = (size_t)p->n + 1;
  }
#endif
  if (!pieces && !st) {
    st = write_atomic(wpath, NULL, 0, &r, tmp, sizeof tmp);
    if (!st && rename(tmp, wpath) != 0) {
      st = rill_status_new(RILL_IO_ERROR, "%s: cannot write: %s", wpath, strerror(errno));
      unlink(tmp);
    }
  }
  char mpath[4200];
  snprintf(mpath, sizeof mpath, "%s/model.vmbc", dir);
  ao.link_weights = false;
  uint8_t *bytes = NULL;
  size_t size = 0;
  /* A module wanted loaded: made in memory (no module file written and
   * mapped again, no checksums), its constants where the importer's pieces
   * and the assembler have them; the pieces (the model file's mapping) go
   * with the module. With a profile the assembler writes bytes: a scratch
   * module file, mapped. */
  rill_module_image_t *image = NULL;
  if (out_module && !ao.profile) ao.output_image = &image;
  else if (out_module) ao.output_file = mpath;
  /* The module's source is the model file, not the scratch text: `rill
   * dis` names it, and a file assembles to the same bytes each time. The
   * statement goes last, so the text's lines keep `rill import`'s numbers. */
  rill_buf_t text;
  rill__buf_init(&text, rill_allocator_system());
  if (!st) st = rill__buf_append(&text, r.vmasm, r.vmasm_len);
  if (!st) st = rill__buf_append(&text, "\nsource ", 8);
  if (!st) st = isa_print_string(&text, in);
  if (!st) st = rill__buf_append(&text, "\n", 1);
  if (!st) {
    st = rill_assemble(NULL, src, (const char *)text.data, text.len, &ao, out_module ? &bytes : out_bytes, out_module ? &size : out_size);
    if (st) {
      /* a diagnostic of the imported text names the model, not the scratch file */
      rill_status_t p = rill_status_new(rill_status_code(st), "%s: the imported program does not assemble: %s", in, rill_status_message(st));
      rill_status_free(st);
      st = p;
    }
  }
#ifndef RILL_ONNX_ABSENT
  if (!st && image && r.parts) {
    if (!(st = rill_module_image_keep(image, keep_parts, r.parts))) r.parts = NULL;
  }
#endif
  if (!st && image) {
    st = rill_module_load_image(NULL, image, out_module);
    image = NULL;
  } else if (!st && out_module) {
    st = rill_module_load_file(NULL, mpath, out_module);
    free(bytes);
  }
  rill_module_image_free(image);
  unlink(mpath);
  unlink(wpath);
  rmdir(dir);
  free(pieces);
  free(lens);
  rill__buf_free(&text);
  onnx_result_free(&r);
  return st;
}

rill_status_t onnx_assemble(const char *in, const onnx_options_t *options, const rill_asm_options_t *asm_options,
                            uint8_t **out_bytes, size_t *out_size) {
  return assemble_in(in, options, asm_options, out_bytes, out_size, NULL);
}

rill_status_t onnx_load_module(const char *in, const onnx_options_t *options, const rill_asm_options_t *asm_options,
                               rill_module_t **out_module) {
  return assemble_in(in, options, asm_options, NULL, NULL, out_module);
}

static bool parse_size(const char *s, const char *end, long long *v) {
  char *e;
  errno = 0;
  *v = strtoll(s, &e, 10);
  return !errno && e != s && e == end && *v >= 0 && *v <= ((long long)1 << 40);
}

bool onnx_options_add_shape(onnx_options_t *o, const char *spec, char *why, size_t nwhy) {
  const char *eq = strrchr(spec, '=');
  if (!eq || eq == spec) {
    snprintf(why, nwhy, "--shape expects NAME=N or NAME=LO..HI, got '%s'", spec);
    return false;
  }
  const char *v = eq + 1, *dots = strstr(v, "..");
  long long n = -1, lo = 0, hi = 0;
  int rank = -1;
  int64_t dims[8];
  if (*v == '[') { /* a whole shape */
    const char *c = v + 1, *close = strchr(c, ']');
    bool ok = close && close[1] == 0;
    for (rank = 0; ok && c < close; rank++) {
      const char *e = memchr(c, ',', (size_t)(close - c));
      if (!e) e = close;
      long long d;
      ok = rank < 8 && parse_size(c, e, &d);
      if (ok) dims[rank] = d;
      c = e < close ? e + 1 : close;
      if (e < close && c == close) ok = false;
    }
    if (!ok) {
      snprintf(why, nwhy, "--shape %.*s: expected a shape [D1,D2,...] of at most 8 sizes 0..2^40, got '%s'", (int)(eq - spec), spec, v);
      return false;
    }
  } else if (dots ? !parse_size(v, dots, &lo) || !parse_size(dots + 2, v + strlen(v), &hi) || lo < 1 || hi < lo
           : !parse_size(v, v + strlen(v), &n)) {
    snprintf(why, nwhy, "--shape %.*s: expected a size 0..2^40 or a range LO..HI (1 <= LO <= HI), got '%s'", (int)(eq - spec), spec, v);
    return false;
  }
  if (o->nshapes >= ONNX_MAX_SHAPES) {
    snprintf(why, nwhy, "at most %d --shape options", ONNX_MAX_SHAPES);
    return false;
  }
  char *name = strndup(spec, (size_t)(eq - spec));
  if (!name) {
    snprintf(why, nwhy, "out of memory");
    return false;
  }
  o->shape_names[o->nshapes] = name;
  o->shape_whole[o->nshapes] = rank + 1;
  if (rank > 0) memcpy(o->shape_dims[o->nshapes], dims, sizeof(int64_t) * (size_t)rank);
  o->shape_lo[o->nshapes] = lo;
  o->shape_hi[o->nshapes] = hi;
  o->shape_values[o->nshapes++] = n;
  return true;
}

void onnx_options_free(onnx_options_t *o) {
  for (int i = 0; i < o->nshapes; i++) free((char *)o->shape_names[i]);
  o->nshapes = 0;
}
