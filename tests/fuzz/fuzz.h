/* fuzz.h - what every fuzz target in tests/fuzz shares: the libFuzzer
 * entry points (defined by each target, driven by libFuzzer in the fuzz
 * build and by replay.c over the seed corpus in the plain and sanitizer
 * builds) and a helper that puts an input in a file. */
#ifndef RC_FUZZ_H
#define RC_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* A property every input must keep; a broken one is a finding (abort, so
 * libFuzzer saves the input). Unlike assert, never compiled out. */
#define FUZZ_CHECK(cond)                                                    \
	do {                                                                \
		if (!(cond)) {                                              \
			fprintf(stderr, "%s:%d: FUZZ_CHECK(%s) failed\n",   \
				__FILE__, __LINE__, #cond);                 \
			abort();                                            \
		}                                                           \
	} while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
/* Optional: once, before the first input. */
int LLVMFuzzerInitialize(int *argc, char ***argv);

/* A memfd holding data, and its /proc/self/fd path in path (>= 32 bytes);
 * the fd, or -1. The caller closes it. */
int fuzz_memfd(const uint8_t *data, size_t size, char *path, size_t pathlen);

#endif
