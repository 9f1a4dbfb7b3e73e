#ifndef RR_CFUZZDRIVER_H
#define RR_CFUZZDRIVER_H
#include <stddef.h>

typedef int (*rr_fuzz_callback)(const unsigned char *data, size_t size);

/// 1 when this binary was linked with libFuzzer (a `scripts/fuzz` build), else 0.
int rr_libfuzzer_available(void);

/// Hands control to libFuzzer's driver; only when `rr_libfuzzer_available()`.
int rr_libfuzzer_run(int *argc, char ***argv, rr_fuzz_callback callback);

#endif
