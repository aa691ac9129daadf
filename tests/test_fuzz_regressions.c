/* test_fuzz_regressions.c: replays every saved fuzzer input through its
 * target (run under ASan and UBSan in CI). */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>

#include "fuzz/targets.h"
#include "helpers.h"

static int replay(const char *sub, void (*fn)(const uint8_t *, size_t)) {
  char dir[4096], path[8192];
  snprintf(dir, sizeof dir, "%s/../fuzz/regressions/%s", fixtures_dir(), sub);
  DIR *d = opendir(dir);
  if (!d) return 0; /* no saved inputs for this target yet */
  struct dirent *e;
  int n = 0;
  while ((e = readdir(d))) {
    if (e->d_name[0] == '.') continue;
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    FILE *f = fopen(path, "rb");
    ck_assert(f != NULL);
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *buf = malloc((size_t)size + 1);
    ck_assert(fread(buf, 1, (size_t)size, f) == (size_t)size);
    fclose(f);
    fn(buf, (size_t)size);
    free(buf);
    n++;
  }
  closedir(d);
  return n;
}

START_TEST(replay_all) {
  int n = replay("asm", fuzz_asm) + replay("module", fuzz_module) + replay("safetensors", fuzz_safetensors) + replay("npy", fuzz_npy) + replay("onnx", fuzz_onnx) + replay("profile", fuzz_profile) +
          replay("pcache", fuzz_pcache);
  ck_assert_int_ge(n, 1);
}
END_TEST

int main(void) { return run_one_test("fuzz-regressions", replay_all, 120); }
