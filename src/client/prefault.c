/* prefault.c - owns libringcache's pre-faulting of arena mappings: a
 * DataLoader worker is a new process every epoch, and without this its
 * first pass over a warm cache takes a page fault per 16 pages (fault-
 * around) of every object it reads (perf/README.md, "First touch"). A
 * helper thread per arena maps the resident pages while the process
 * already reads, so the time to the first byte does not wait for it. It
 * uses a CPU nobody else wants or none: starved (readers outnumber the
 * CPUs), it stops, and each reader faults only what it reads. */
#include "prefault.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "extents.h"

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22 /* Linux 5.14 */
#endif

/* Populated per call: a stop request waits for at most one chunk. */
#define CHUNK (8u << 20)
/* A helper that got less than half a CPU over this long gives up: the
 * CPUs are taken (readers, the daemon), and pages it would map for the
 * whole cache are cheaper faulted by each reader for what it reads. */
#define STARVED_AFTER_NS 2000000ull

struct job {
	const void *owner;
	int fd;
	const uint8_t *base;
	size_t size;
	atomic_bool stop;
	bool background;      /* on the helper thread: may give up */
	bool joined;          /* job_join ran (a fork, or the owner) */
	uint64_t wall0, cpu0; /* when the helper started */
	pthread_t thread;
	struct job *next;
};

static pthread_mutex_t jobs_lock = PTHREAD_MUTEX_INITIALIZER;
static struct job *jobs;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

enum mode { OFF, BACKGROUND, SYNC };

/* ThreadSanitizer mis-tracks a thread created in a fork()ed child of a
 * threaded parent (glibc reuses a parent thread's stack: "dup thread with
 * used id"), and tests attach in such children: populate in rc_attach
 * there. */
#if defined(__SANITIZE_THREAD__)
#define DEFAULT_MODE SYNC
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define DEFAULT_MODE SYNC
#endif
#endif
#ifndef DEFAULT_MODE
#define DEFAULT_MODE BACKGROUND
#endif

static enum mode prefault_mode(void)
{
	const char *env = getenv("RINGCACHE_PREFAULT");
	if (env && strcmp(env, "0") == 0)
		return OFF;
	return env && strcmp(env, "sync") == 0 ? SYNC : DEFAULT_MODE;
}

static uint64_t thread_cpu_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* The helper waited for a CPU more than it ran. */
static bool starved(const struct job *j)
{
	if (!j->background)
		return false;
	uint64_t wall = rc_now_ns() - j->wall0;
	return wall > STARVED_AFTER_NS && wall > 2 * (thread_cpu_ns() - j->cpu0);
}

/* Populates [from, to) in chunks; false if stopped, starved or
 * unsupported. */
static bool populate(struct job *j, size_t from, size_t to)
{
	for (size_t at = from; at < to; at += CHUNK) {
		if (atomic_load_explicit(&j->stop, memory_order_relaxed) ||
		    starved(j))
			return false;
		size_t len = to - at < CHUNK ? to - at : CHUNK;
		/* A range the daemon punches meanwhile fails (EFAULT) or maps
		 * the hole's new page; either way only this chunk is lost. */
		if (madvise((void *)(j->base + at), len, MADV_POPULATE_READ) < 0 &&
		    errno == EINVAL)
			return false; /* kernel before 5.14 */
	}
	return true;
}

static void run(struct job *j)
{
	uint64_t end;

	for (uint64_t pos = 0; rc_next_data_extent(j->fd, j->size, &pos, &end);
	     pos = end)
		if (!populate(j, (size_t)pos, (size_t)end))
			break;
}

static void *thread_main(void *arg)
{
	struct job *j = arg;
	j->background = true;
	j->wall0 = rc_now_ns();
	j->cpu0 = thread_cpu_ns();
	run(j);
	return NULL;
}

/* Stops and joins a job's helper (once). */
static void job_join(struct job *j)
{
	if (j->joined)
		return;
	atomic_store(&j->stop, true);
	pthread_join(j->thread, NULL);
	j->joined = true;
}

/* No helper runs across a fork: one inside the allocator (an ASan build's
 * takes a lock to free its thread's memory) would leave that lock held
 * for ever in the child, whose first malloc then never returns. The
 * parent's helpers stop after at most one chunk; their pages stay as far
 * as they got. */
static void lock_jobs(void)
{
	pthread_mutex_lock(&jobs_lock);
	for (struct job *j = jobs; j; j = j->next)
		job_join(j);
}

static void unlock_jobs(void)
{
	pthread_mutex_unlock(&jobs_lock);
}

/* In a fork()ed child the threads are gone: drop the jobs unjoined. */
static void forget_jobs(void)
{
	while (jobs) {
		struct job *j = jobs;
		jobs = j->next;
		close(j->fd);
		free(j);
	}
	pthread_mutex_unlock(&jobs_lock);
}

static void install_atfork(void)
{
	pthread_atfork(lock_jobs, unlock_jobs, forget_jobs);
}

void rc_prefault_start(const void *owner, int fd, const void *base,
		       size_t size)
{
	enum mode m = prefault_mode();
	struct job *j = m == OFF ? NULL : calloc(1, sizeof(*j));
	if (!j)
		return;
	*j = (struct job){.owner = owner, .base = base, .size = size,
			  .fd = fcntl(fd, F_DUPFD_CLOEXEC, 0)};
	if (j->fd < 0) {
		free(j);
		return;
	}
	pthread_once(&atfork_once, install_atfork);
	/* Listed before it runs, under the lock: a fork meanwhile finds it. */
	pthread_mutex_lock(&jobs_lock);
	if (m == BACKGROUND &&
	    pthread_create(&j->thread, NULL, thread_main, j) == 0) {
		j->next = jobs;
		jobs = j;
		j = NULL;
	}
	pthread_mutex_unlock(&jobs_lock);
	if (j) { /* SYNC, or no thread */
		run(j);
		close(j->fd);
		free(j);
	}
}

void rc_prefault_stop(const void *owner)
{
	/* Joined under the lock (helpers never take it): a fork in another
	 * thread meanwhile waits rather than copy a helper mid-stop. */
	pthread_mutex_lock(&jobs_lock);
	for (struct job **pp = &jobs; *pp;) {
		struct job *j = *pp;
		if (j->owner != owner) {
			pp = &j->next;
			continue;
		}
		*pp = j->next;
		job_join(j);
		close(j->fd);
		free(j);
	}
	pthread_mutex_unlock(&jobs_lock);
}
