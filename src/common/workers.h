/* workers.h - a shard's helper threads for CPU-heavy jobs its reactor must
 * not run inline: the digests of upload parts (MD5 for Content-MD5 and
 * SHA-256 for the signature cost 20 ms per 8 MiB part; inline they stall
 * every transfer and client ring of the shard meanwhile).
 *
 * Ownership. The pool owns its threads, its queues and an eventfd. The
 * reactor polls the eventfd (workers_fd) and calls workers_reap on each
 * completion of that read, on its own thread: every finished job's done
 * callback runs there, in no particular order. run callbacks run on a
 * worker thread and may touch only what their job owns. */
#ifndef RC_WORKERS_H
#define RC_WORKERS_H

struct workers;

/* n threads (at least 1). NULL (errno set) on failure. */
struct workers *workers_new(unsigned n, const char *name);
/* Waits for queued and running jobs (their done callbacks are not called),
 * stops the threads, frees everything. NULL is ignored. */
void workers_free(struct workers *w);

/* Queues run(arg) for a worker; done(arg) follows on the reactor's thread
 * (workers_reap). 0 or -ENOMEM. */
int workers_submit(struct workers *w, void (*run)(void *arg),
		   void (*done)(void *arg), void *arg);

/* A kind of job that runs faster several at a time (the digests of
 * upload parts, side by side in SIMD lanes): a worker takes the queued
 * jobs of one kind together, up to max, in queue order, and calls
 * run_many once for them; each one's done follows as for
 * workers_submit. */
struct workers_kind {
	void (*run_many)(void **args, unsigned n);
	unsigned max; /* 1 to WORKERS_MANY_MAX */
};
#define WORKERS_MANY_MAX 16
int workers_submit_kind(struct workers *w, const struct workers_kind *kind,
			void (*done)(void *arg), void *arg);

/* The eventfd that becomes readable when jobs are finished. */
int workers_fd(const struct workers *w);
/* Runs the done callbacks of the finished jobs; returns how many. */
unsigned workers_reap(struct workers *w);
/* Jobs submitted and not yet reaped. */
unsigned workers_pending(const struct workers *w);

#endif
