/* gpubench.c - rc-gpubench: owns the pinned-buffer check, what a GPU data
 * loader gets from ringcache: cache hits DMA'd to the GPU with
 * cudaMemcpyAsync, measured against copies from the process's own memory.
 * The CUDA runtime comes from libringcache's loader (rc_cuda_runtime, a
 * dlopen), so this builds and links without CUDA and says so at run time.
 *
 * Every object of the tools/dataset.h dataset is read once to warm the
 * cache, then each mode moves the whole dataset to the GPU `--passes`
 * times, block by block, `--batch` blocks in flight on one stream:
 *   host-pinned    cudaMallocHost buffer -> GPU (the DMA ceiling)
 *   host-pageable  malloc'd buffer -> GPU (what an unpinned loader gets)
 *   arena-pageable READ leases in the arena -> GPU, arena not registered
 *   arena-pinned   READ leases -> GPU after rc_cuda_pin_arenas (zero copy)
 *   into-pinned    READ_INTO a registered buffer pinned by rc_cuda_pin,
 *                  then -> GPU (one CPU copy, then DMA)
 * and prints GB/s (median of passes) and the ratio to host-pinned. After
 * the timed passes every block of the dataset goes arena -> GPU -> host
 * once more and is compared with tools/dataset.h: the bytes that reached
 * the GPU are the object's bytes. */
#include <errno.h>
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <dlfcn.h>

#include "ringcache.h"
#include "../tools/dataset.h"
#include "bench.h"

#define MAX_PASSES 64
#define MAX_EXTENTS 8
#define CUDA_H2D 1
#define CUDA_D2H 2

struct cuda_api {
	int (*set_device)(int);
	int (*malloc_dev)(void **, size_t);
	int (*free_dev)(void *);
	int (*malloc_host)(void **, size_t);
	int (*free_host)(void *);
	int (*stream_create)(void **);
	int (*stream_sync)(void *);
	int (*memcpy_async)(void *, const void *, size_t, int, void *);
	int (*memcpy_sync)(void *, const void *, size_t, int);
	const char *(*error_string)(int);
};

struct opts {
	const char *socket, *dataset;
	size_t n_small;
	int passes, batch, gpu;
};

/* One block of the dataset: object handle and range. */
struct block {
	uint32_t handle;
	uint32_t object;
	uint64_t offset, len;
};

struct bench {
	struct opts o;
	struct cuda_api cu;
	struct rc_client c;
	struct ds_spec spec;
	struct block *blocks;
	size_t n_blocks;
	uint64_t bytes;
	void *stream, *dev, *host_pinned, *host_pageable;
	void *into_buf;
	int into_index;
	struct rc_extent (*ext)[MAX_EXTENTS];
	int *n_ext;
};

static int die_cuda(const struct bench *b, const char *what, int err)
{
	fprintf(stderr, "rc-gpubench: %s: %s (%d)\n", what,
		b->cu.error_string ? b->cu.error_string(err) : "?", err);
	exit(1);
}

#define CU(b, call) do { int e_ = (call); if (e_) die_cuda(b, #call, e_); } while (0)

static void *must_sym(void *lib, const char *name)
{
	void *p = dlsym(lib, name);
	if (!p) {
		fprintf(stderr, "rc-gpubench: CUDA runtime lacks %s\n", name);
		exit(1);
	}
	return p;
}

static void load_cuda(struct cuda_api *cu)
{
	void *lib = rc_cuda_runtime();
	if (!lib) {
		fprintf(stderr, "rc-gpubench: %s\n", rc_cuda_error());
		exit(2);
	}
	*(void **)&cu->set_device = must_sym(lib, "cudaSetDevice");
	*(void **)&cu->malloc_dev = must_sym(lib, "cudaMalloc");
	*(void **)&cu->free_dev = must_sym(lib, "cudaFree");
	*(void **)&cu->malloc_host = must_sym(lib, "cudaMallocHost");
	*(void **)&cu->free_host = must_sym(lib, "cudaFreeHost");
	*(void **)&cu->stream_create = must_sym(lib, "cudaStreamCreate");
	*(void **)&cu->stream_sync = must_sym(lib, "cudaStreamSynchronize");
	*(void **)&cu->memcpy_async = must_sym(lib, "cudaMemcpyAsync");
	*(void **)&cu->memcpy_sync = must_sym(lib, "cudaMemcpy");
	*(void **)&cu->error_string = must_sym(lib, "cudaGetErrorString");
}

/* Opens every object and cuts it into cache blocks. */
static void plan_blocks(struct bench *b)
{
	size_t n = ds_count(&b->spec);
	uint64_t bs = b->c.block_size;
	b->blocks = calloc(ds_total_bytes(&b->spec) / bs + n + 1,
			   sizeof(*b->blocks));
	for (size_t i = 0; i < n; i++) {
		char key[DS_KEY_MAX];
		uint64_t size = ds_size(&b->spec, i);
		if (!size)
			continue;
		int h = rc_open(&b->c, rc_dataset(&b->c, b->o.dataset),
				ds_key(&b->spec, i, key), NULL);
		if (h < 0) {
			fprintf(stderr, "rc-gpubench: open %s: %s\n", key,
				rc_strerror(h));
			exit(1);
		}
		for (uint64_t off = 0; off < size; off += bs) {
			uint64_t len = size - off < bs ? size - off : bs;
			b->blocks[b->n_blocks++] = (struct block){
				(uint32_t)h, (uint32_t)i, off, len};
			b->bytes += len;
		}
	}
}

/* READ of one block, leased: its extents stay put until released. */
static void lease_block(struct bench *b, size_t i, size_t slot)
{
	const struct block *k = &b->blocks[i];
	int n = rc_read(&b->c, k->handle, k->offset, k->len, b->ext[slot],
			MAX_EXTENTS);
	if (n < 0) {
		fprintf(stderr, "rc-gpubench: read: %s\n", rc_strerror(n));
		exit(1);
	}
	b->n_ext[slot] = n;
}

static void release_slot(struct bench *b, size_t slot)
{
	for (int e = 0; e < b->n_ext[slot]; e++)
		rc_release(&b->c, b->ext[slot][e].lease);
	b->n_ext[slot] = 0;
}

/* Queues slot's extents to the GPU at dev_off; returns bytes queued. */
static uint64_t dma_slot(struct bench *b, size_t slot, size_t dev_off)
{
	uint64_t done = 0;
	for (int e = 0; e < b->n_ext[slot]; e++) {
		const struct rc_extent *x = &b->ext[slot][e];
		CU(b, b->cu.memcpy_async((char *)b->dev + dev_off + done,
					 x->data, x->len, CUDA_H2D, b->stream));
		done += x->len;
	}
	return done;
}

enum mode { HOST_PINNED, HOST_PAGEABLE, ARENA, INTO_PINNED, N_MODES };

/* One pass over the dataset in batches; returns seconds. */
static double pass(struct bench *b, enum mode m)
{
	uint64_t bs = b->c.block_size;
	size_t batch = (size_t)b->o.batch;
	double t0 = rc_now_s();
	for (size_t first = 0; first < b->n_blocks; first += batch) {
		size_t n = b->n_blocks - first < batch ? b->n_blocks - first
						       : batch;
		for (size_t j = 0; j < n; j++) {
			const struct block *k = &b->blocks[first + j];
			char *dst = (char *)b->dev + j * bs;
			if (m == HOST_PINNED || m == HOST_PAGEABLE) {
				const char *src = m == HOST_PINNED
					? b->host_pinned : b->host_pageable;
				CU(b, b->cu.memcpy_async(dst, src + j * bs,
							 k->len, CUDA_H2D,
							 b->stream));
			} else if (m == ARENA) {
				lease_block(b, first + j, j);
				dma_slot(b, j, j * bs);
			} else {
				ssize_t r = rc_read_into(&b->c, k->handle,
							 k->offset, k->len,
							 (uint32_t)b->into_index,
							 j * bs);
				if (r != (ssize_t)k->len) {
					fprintf(stderr, "rc-gpubench: read_into: %s\n",
						rc_strerror((int)r));
					exit(1);
				}
				CU(b, b->cu.memcpy_async(dst,
					(char *)b->into_buf + j * bs, k->len,
					CUDA_H2D, b->stream));
			}
		}
		CU(b, b->cu.stream_sync(b->stream));
		if (m == ARENA)
			for (size_t j = 0; j < n; j++)
				release_slot(b, j);
	}
	return rc_now_s() - t0;
}

static int cmp_double(const void *x, const void *y)
{
	double a = *(const double *)x, c = *(const double *)y;
	return (a > c) - (a < c);
}

static double median_gbps(struct bench *b, enum mode m)
{
	double secs[MAX_PASSES];
	for (int p = 0; p < b->o.passes; p++)
		secs[p] = pass(b, m);
	qsort(secs, (size_t)b->o.passes, sizeof(double), cmp_double);
	return (double)b->bytes / secs[b->o.passes / 2] / 1e9;
}

/* Every block arena -> GPU -> host, compared with the dataset's bytes. */
static uint64_t verify_all(struct bench *b)
{
	uint64_t bs = b->c.block_size, checked = 0;
	char *back = b->host_pageable;
	for (size_t i = 0; i < b->n_blocks; i++) {
		const struct block *k = &b->blocks[i];
		lease_block(b, i, 0);
		uint64_t len = dma_slot(b, 0, 0);
		CU(b, b->cu.stream_sync(b->stream));
		release_slot(b, 0);
		memset(back, 0, bs);
		CU(b, b->cu.memcpy_sync(back, b->dev, len, CUDA_D2H));
		int64_t bad = len == k->len
			? ds_mismatch(&b->spec, k->object, k->offset, back, len)
			: 0;
		if (bad >= 0) {
			char key[DS_KEY_MAX];
			fprintf(stderr, "rc-gpubench: %s at %llu: GPU bytes differ"
				" from the object (byte %lld of %llu)\n",
				ds_key(&b->spec, k->object, key),
				(unsigned long long)k->offset, (long long)bad,
				(unsigned long long)len);
			exit(1);
		}
		checked += len;
	}
	return checked;
}

static void setup_buffers(struct bench *b)
{
	size_t span = (size_t)b->o.batch * b->c.block_size;
	CU(b, b->cu.set_device(b->o.gpu));
	CU(b, b->cu.stream_create(&b->stream));
	CU(b, b->cu.malloc_dev(&b->dev, span));
	CU(b, b->cu.malloc_host(&b->host_pinned, span));
	b->host_pageable = malloc(span);
	memset(b->host_pinned, 1, span);
	memset(b->host_pageable, 1, span);
	b->ext = calloc((size_t)b->o.batch, sizeof(*b->ext));
	b->n_ext = calloc((size_t)b->o.batch, sizeof(*b->n_ext));
	b->into_index = rc_alloc_buffer(&b->c, span, &b->into_buf);
	if (b->into_index < 0) {
		fprintf(stderr, "rc-gpubench: buffer: %s\n",
			rc_strerror(b->into_index));
		exit(1);
	}
	int r = rc_cuda_pin(b->into_buf, span);
	if (r < 0) {
		fprintf(stderr, "rc-gpubench: rc_cuda_pin: %s\n", rc_cuda_error());
		exit(1);
	}
}

static void usage(void)
{
	fprintf(stderr, "usage: rc-gpubench --socket PATH --dataset NAME "
		"[--small N] [--passes N] [--batch N] [--gpu N]\n");
	exit(2);
}

static void parse(int argc, char **argv, struct opts *o)
{
	static const struct option longopts[] = {
		{"socket", 1, 0, 's'}, {"dataset", 1, 0, 'd'},
		{"small", 1, 0, 'n'}, {"passes", 1, 0, 'p'},
		{"batch", 1, 0, 'b'}, {"gpu", 1, 0, 'g'}, {0, 0, 0, 0}};
	*o = (struct opts){.n_small = DS_DEFAULT_SMALL, .passes = 9,
			   .batch = 16};
	int ch;
	while ((ch = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
		switch (ch) {
		case 's': o->socket = optarg; break;
		case 'd': o->dataset = optarg; break;
		case 'n': o->n_small = strtoul(optarg, NULL, 10); break;
		case 'p': o->passes = atoi(optarg); break;
		case 'b': o->batch = atoi(optarg); break;
		case 'g': o->gpu = atoi(optarg); break;
		default: usage();
		}
	}
	if (!o->socket || !o->dataset || o->passes < 1 ||
	    o->passes > MAX_PASSES || o->batch < 1)
		usage();
}

int main(int argc, char **argv)
{
	struct bench b = {0};
	parse(argc, argv, &b.o);
	load_cuda(&b.cu);
	b.spec = (struct ds_spec){.n_small = b.o.n_small,
				  .seed = DS_DEFAULT_SEED};
	struct rc_attach_opts ao = {.gpu = b.o.gpu, .numa_node = -1};
	int r = rc_attach(&b.c, b.o.socket, &ao);
	if (r < 0) {
		fprintf(stderr, "rc-gpubench: attach: %s\n", rc_strerror(r));
		return 1;
	}
	plan_blocks(&b);
	setup_buffers(&b);
	double t0 = rc_now_s();
	pass(&b, ARENA); /* warm: every block into the cache */
	double warm_s = rc_now_s() - t0;

	static const char *names[] = {"host-pinned", "host-pageable",
				      "arena-pageable", "arena-pinned",
				      "into-pinned"};
	double gbps[5];
	gbps[0] = median_gbps(&b, HOST_PINNED);
	gbps[1] = median_gbps(&b, HOST_PAGEABLE);
	gbps[2] = median_gbps(&b, ARENA);
	double pin_t0 = rc_now_s();
	r = rc_cuda_pin_arenas(&b.c);
	double pin_s = rc_now_s() - pin_t0;
	if (r < 0) {
		fprintf(stderr, "rc-gpubench: rc_cuda_pin_arenas: %s\n",
			rc_cuda_error());
		return 1;
	}
	gbps[3] = median_gbps(&b, ARENA);
	gbps[4] = median_gbps(&b, INTO_PINNED);
	uint64_t checked = verify_all(&b);

	printf("# %zu blocks of %u KiB, %.1f MB, batch %d, %d passes; "
	       "cold fill %.2f s; arena pinning took %.3f s\n",
	       b.n_blocks, b.c.block_size / 1024, (double)b.bytes / 1e6,
	       b.o.batch, b.o.passes, warm_s, pin_s);
	printf("| mode | GB/s (median) | / host-pinned |\n|---|---:|---:|\n");
	for (int m = 0; m < 5; m++)
		printf("| %s | %.2f | %.2fx |\n", names[m], gbps[m],
		       gbps[m] / gbps[0]);
	printf("verified: %.1f MB arena -> GPU -> host equal to the objects\n",
	       (double)checked / 1e6);
	rc_cuda_unpin(b.into_buf);
	rc_detach(&b.c);
	return 0;
}
