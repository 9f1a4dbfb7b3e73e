// libFuzzer's entry, weak: an ordinary build (no -sanitize=fuzzer) links without it and the fuzz
// executable then only replays the inputs it is given, which is how `swift test` runs FailCases.
#include "CFuzzDriver.h"

extern int LLVMFuzzerRunDriver(int *argc, char ***argv, int (*callback)(const unsigned char *data, size_t size))
    __attribute__((weak));

int rr_libfuzzer_available(void) { return LLVMFuzzerRunDriver != NULL; }

int rr_libfuzzer_run(int *argc, char ***argv, rr_fuzz_callback callback) {
    return LLVMFuzzerRunDriver(argc, argv, callback);
}
