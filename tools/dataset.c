/* dataset.c - owns the deterministic sample dataset: its key names, object
 * sizes and byte contents (see dataset.h). Bytes are little-endian 64-bit
 * words, word w of object i being splitmix64(stream(i) + w), so any offset
 * costs O(1) to reach. */
#include "dataset.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MIB (1024ULL * 1024ULL)
#define SMALL_BASE 570000ULL
#define SMALL_SPREAD 10000ULL

static const char *const edge_keys[DS_N_EDGE] = {
	"edge/empty", "edge/one", "edge/block", "edge/block-plus-one",
};
static const uint64_t edge_sizes[DS_N_EDGE] = { 0, 1, MIB, MIB + 1 };
static const uint64_t large_sizes[DS_N_LARGE] = {
	20 * MIB, 33 * MIB + 12345, 48 * MIB - 1,
};

static uint64_t splitmix64(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ULL;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
	return x ^ (x >> 31);
}

/* Per-object stream base: hashing twice keeps neighbouring objects'
 * streams unrelated (a plain seed ^ i*K would let them overlap). */
static uint64_t stream_base(const struct ds_spec *spec, size_t i)
{
	return splitmix64(spec->seed ^ splitmix64((uint64_t)i * 0x2545f4914f6cdd1dULL));
}

void ds_spec_default(struct ds_spec *spec)
{
	spec->n_small = DS_DEFAULT_SMALL;
	spec->seed = DS_DEFAULT_SEED;
}

size_t ds_count(const struct ds_spec *spec)
{
	return spec->n_small + DS_N_LARGE + DS_N_EDGE;
}

const char *ds_key(const struct ds_spec *spec, size_t i, char *buf)
{
	if (i < spec->n_small) {
		snprintf(buf, DS_KEY_MAX, "small/%05zu.bin", i);
		return buf;
	}
	i -= spec->n_small;
	if (i < DS_N_LARGE) {
		snprintf(buf, DS_KEY_MAX, "large/%zu.bin", i);
		return buf;
	}
	i -= DS_N_LARGE;
	if (i < DS_N_EDGE) {
		snprintf(buf, DS_KEY_MAX, "%s", edge_keys[i]);
		return buf;
	}
	return NULL;
}

uint64_t ds_size(const struct ds_spec *spec, size_t i)
{
	if (i < spec->n_small) {
		uint64_t h = splitmix64(spec->seed ^ ~(uint64_t)i);
		return SMALL_BASE - SMALL_SPREAD + h % (2 * SMALL_SPREAD + 1);
	}
	i -= spec->n_small;
	if (i < DS_N_LARGE)
		return large_sizes[i];
	i -= DS_N_LARGE;
	if (i < DS_N_EDGE)
		return edge_sizes[i];
	return 0;
}

uint64_t ds_total_bytes(const struct ds_spec *spec)
{
	uint64_t total = 0;
	for (size_t i = 0; i < ds_count(spec); i++)
		total += ds_size(spec, i);
	return total;
}

/* Parses "small/NNNNN.bin" strictly: the digits must be what ds_key would
 * print for that index, so "small/1.bin" does not alias "small/00001.bin". */
static long small_index(const struct ds_spec *spec, const char *key)
{
	const char *digits = key + strlen("small/");
	char *end;
	unsigned long long n = strtoull(digits, &end, 10);
	if (end == digits || strcmp(end, ".bin") != 0 || n >= spec->n_small)
		return -1;
	char canon[DS_KEY_MAX];
	if (strcmp(ds_key(spec, (size_t)n, canon), key) != 0)
		return -1;
	return (long)n;
}

long ds_index(const struct ds_spec *spec, const char *key)
{
	if (strncmp(key, "small/", 6) == 0)
		return small_index(spec, key);
	char buf[DS_KEY_MAX];
	for (size_t j = 0; j < DS_N_LARGE + DS_N_EDGE; j++) {
		size_t i = spec->n_small + j;
		if (strcmp(ds_key(spec, i, buf), key) == 0)
			return (long)i;
	}
	return -1;
}

/* One 8-byte store of v, little-endian: a single access for the
 * sanitizers to check (the tests' builds verify hundreds of MiB). */
static void put_le64(unsigned char *p, uint64_t v)
{
#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
	v = __builtin_bswap64(v);
#endif
	memcpy(p, &v, sizeof(v));
}

void ds_fill(const struct ds_spec *spec, size_t i, uint64_t off, void *buf,
	     size_t len)
{
	unsigned char *out = buf;
	uint64_t base = stream_base(spec, i);
	uint64_t w = off / 8;
	unsigned char word[8];

	/* Leading partial word. */
	size_t skip = (size_t)(off % 8);
	if (skip && len) {
		put_le64(word, splitmix64(base + w++));
		size_t n = 8 - skip < len ? 8 - skip : len;
		memcpy(out, word + skip, n);
		out += n;
		len -= n;
	}
	for (; len >= 8; len -= 8, out += 8)
		put_le64(out, splitmix64(base + w++));
	if (len) {
		put_le64(word, splitmix64(base + w));
		memcpy(out, word, len);
	}
}

int64_t ds_mismatch(const struct ds_spec *spec, size_t i, uint64_t off,
		    const void *buf, size_t len)
{
	const unsigned char *got = buf;
	uint64_t base = stream_base(spec, i);
	size_t k = 0;

	while (k < len) {
		uint64_t pos = off + k;
		size_t skip = (size_t)(pos % 8);
		size_t n = 8 - skip < len - k ? 8 - skip : len - k;
		unsigned char want[8];
		put_le64(want, splitmix64(base + pos / 8));
		/* A whole word is one load and one compare: the sanitized
		 * builds check hundreds of MiB through here. */
		if (n == 8) {
			uint64_t g, x;
			memcpy(&g, got + k, 8);
			memcpy(&x, want, 8);
			if (g == x) {
				k += 8;
				continue;
			}
		}
		for (size_t j = 0; j < n; j++)
			if (want[skip + j] != got[k + j])
				return (int64_t)(pos + j);
		k += n;
	}
	return -1;
}
