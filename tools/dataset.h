/* dataset.h - a deterministic, random-access sample dataset for tests, the
 * demo and benchmarks. Every byte of every object is a pure function of
 * (seed, object index, offset), so any range can be generated or checked
 * without producing the bytes before it and without storing anything.
 *
 * Object order (index i):
 *   [0, n_small)          "small/%05zu.bin", 570000 +- 10000 bytes
 *   n_small + 0..2        "large/0.bin" 20 MiB, "large/1.bin" 33 MiB + 12345,
 *                         "large/2.bin" 48 MiB - 1
 *   n_small + 3..6        "edge/empty" 0 B, "edge/one" 1 B,
 *                         "edge/block" 1 MiB, "edge/block-plus-one" 1 MiB + 1
 * Keys are relative: callers prepend their dataset prefix. */
#ifndef RC_TOOLS_DATASET_H
#define RC_TOOLS_DATASET_H

#include <stddef.h>
#include <stdint.h>

#define DS_KEY_MAX 64            /* buffer size for ds_key */
#define DS_DEFAULT_SMALL 300
#define DS_DEFAULT_SEED 0x5eed0001ULL
#define DS_N_LARGE 3
#define DS_N_EDGE 4

struct ds_spec {
	size_t n_small;  /* the scale: how many small objects */
	uint64_t seed;
};

/* 300 small objects, the default seed. */
void ds_spec_default(struct ds_spec *spec);

size_t ds_count(const struct ds_spec *spec);
/* Writes object i's relative key into buf (DS_KEY_MAX bytes); returns buf,
 * or NULL if i is out of range. */
const char *ds_key(const struct ds_spec *spec, size_t i, char *buf);
/* Size in bytes of object i (0 if i is out of range). */
uint64_t ds_size(const struct ds_spec *spec, size_t i);
/* Sum of all object sizes. */
uint64_t ds_total_bytes(const struct ds_spec *spec);
/* Index of the object with relative key key, or -1 if none. */
long ds_index(const struct ds_spec *spec, const char *key);

/* Object i's bytes [off, off+len) into buf. Bytes past the object's end
 * are filled too (the stream is unbounded); callers clamp to ds_size. */
void ds_fill(const struct ds_spec *spec, size_t i, uint64_t off, void *buf,
	     size_t len);
/* Offset of the first byte of buf that differs from object i's bytes at
 * [off, off+len), or -1 if all equal. */
int64_t ds_mismatch(const struct ds_spec *spec, size_t i, uint64_t off,
		    const void *buf, size_t len);

#endif
