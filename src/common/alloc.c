/* alloc.c - owns ringcached's jemalloc configuration: the malloc_conf
 * string jemalloc reads before the first allocation. Compiled into the
 * executables that link jemalloc (meson -Dallocator=jemalloc, alloc_dep)
 * and into nothing else: a library must not choose its host's allocator.
 *
 * Why each setting, and what it measured, is in perf/README.md
 * ("Allocator"); MALLOC_CONF in the environment still overrides it. */
#include <jemalloc/jemalloc.h>

/* tcache_max: each PUT and UploadPart that libcurl performs allocates a
 * 64 KiB upload buffer, above the default thread-cache limit (32 KiB),
 * so every write request went to its arena for it; 128 KiB keeps it in
 * the reactor thread's cache. */
const char *malloc_conf = "tcache_max:131072";
