// The checks of the programs in tests/cu (and tests/cu12): each prints one line,
// "ok   what" or "FAIL what (line N)"; a program ends with
// `return summary("name");`, which prints "name: N checks, M failed" (what the tests
// look for) and gives the exit status (1 when a check failed).
#pragma once
#include <cstdio>

static int checks, failures;
#define CHECK(what, cond)                                                          \
  do {                                                                             \
    checks++;                                                                      \
    if (cond) {                                                                    \
      printf("ok   %s\n", what);                                                   \
    } else {                                                                       \
      failures++;                                                                  \
      printf("FAIL %s (line %d)\n", what, __LINE__);                               \
    }                                                                              \
  } while (0)
// A runtime call that must succeed.
#define OK(call) CHECK(#call, (call) == cudaSuccess)

static int summary(const char *name) {
  printf("%s: %d checks, %d failed\n", name, checks, failures);
  return failures ? 1 : 0;
}
