/* cuda.c - libringcache's optional CUDA pinning: page-locks the arena
 * mappings (and a client's own buffers) with cudaHostRegister so that
 * cudaMemcpyAsync DMAs cache hits straight to the GPU, with no bounce
 * through a staging buffer. The CUDA runtime is loaded at run time
 * (dlopen), so neither the library nor the daemon needs CUDA to build or to
 * run; without it these calls answer -ENOSYS.
 * Owns: the runtime's dlopen handle and the entry points used here. */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "ringcache.h"

/* cudaHostRegister flags (driver_types.h); values are ABI. */
#define CUDA_HOST_REGISTER_PORTABLE 0x01u
#define CUDA_HOST_REGISTER_READ_ONLY 0x08u
#define CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED 712

typedef int (*host_register_fn)(void *ptr, size_t size, unsigned flags);
typedef int (*host_unregister_fn)(void *ptr);
typedef const char *(*error_string_fn)(int err);

static struct {
	pthread_once_t once;
	void *lib;
	host_register_fn host_register;
	host_unregister_fn host_unregister;
	error_string_fn error_string;
	int last_error;
} cuda = {.once = PTHREAD_ONCE_INIT};

/* Tried in order; RINGCACHE_CUDART names another (e.g. a wheel's copy). */
static const char *const runtime_names[] = {
	"libcudart.so", "libcudart.so.13", "libcudart.so.12",
	"libcudart.so.11.0",
};

static void cuda_load(void)
{
	const char *forced = getenv("RINGCACHE_CUDART");
	void *lib = NULL;
	if (forced && *forced) {
		lib = dlopen(forced, RTLD_NOW | RTLD_LOCAL);
	} else {
		for (size_t i = 0; !lib && i < sizeof(runtime_names) /
						   sizeof(runtime_names[0]); i++)
			lib = dlopen(runtime_names[i], RTLD_NOW | RTLD_LOCAL);
	}
	if (!lib)
		return;
	cuda.host_register = (host_register_fn)dlsym(lib, "cudaHostRegister");
	cuda.host_unregister =
		(host_unregister_fn)dlsym(lib, "cudaHostUnregister");
	cuda.error_string = (error_string_fn)dlsym(lib, "cudaGetErrorString");
	if (!cuda.host_register || !cuda.host_unregister) {
		dlclose(lib);
		return;
	}
	cuda.lib = lib;
}

void *rc_cuda_runtime(void)
{
	pthread_once(&cuda.once, cuda_load);
	return cuda.lib;
}

const char *rc_cuda_error(void)
{
	if (!rc_cuda_runtime())
		return "no CUDA runtime (libcudart) could be loaded";
	if (!cuda.last_error)
		return "no error";
	return cuda.error_string ? cuda.error_string(cuda.last_error)
				 : "CUDA error";
}

static int register_range(void *p, size_t size, unsigned flags)
{
	if (!rc_cuda_runtime())
		return -ENOSYS;
	int err = cuda.host_register(p, size, flags);
	if (err == CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED)
		return -EALREADY;
	cuda.last_error = err;
	return err ? -EIO : 0;
}

int rc_cuda_pin(void *p, size_t size)
{
	return register_range(p, size, CUDA_HOST_REGISTER_PORTABLE);
}

int rc_cuda_unpin(void *p)
{
	if (!rc_cuda_runtime())
		return -ENOSYS;
	int err = cuda.host_unregister(p);
	cuda.last_error = err;
	return err ? -EIO : 0;
}

int rc_cuda_pin_arenas(struct rc_client *c)
{
	for (uint32_t i = 0; i < c->n_datasets; i++) {
		struct rc_arena_map *a = &c->arenas[i];
		if (!a->base || a->cuda_pinned)
			continue;
		/* The mapping is PROT_READ: the GPU only ever reads it. */
		int r = register_range((void *)a->base, a->size,
				       CUDA_HOST_REGISTER_PORTABLE |
					       CUDA_HOST_REGISTER_READ_ONLY);
		if (r < 0 && r != -EALREADY) {
			rc_cuda_unpin_arenas(c);
			return r;
		}
		a->cuda_pinned = r == 0;
	}
	return 0;
}

void rc_cuda_unpin_arenas(struct rc_client *c)
{
	for (uint32_t i = 0; c->arenas && i < c->n_datasets; i++) {
		struct rc_arena_map *a = &c->arenas[i];
		if (a->cuda_pinned && cuda.lib)
			cuda.host_unregister((void *)a->base);
		a->cuda_pinned = 0;
	}
}
