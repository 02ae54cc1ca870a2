/* workers.c - owns a shard's helper threads (see workers.h): a job queue
 * under a mutex, the finished list, and the eventfd that tells the
 * reactor. */
#include "workers.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "list.h"

#define MAX_WORKERS 16

struct job {
	void (*run)(void *arg);
	const struct workers_kind *kind; /* or NULL: run alone */
	void (*done)(void *arg);
	void *arg;
	struct rc_list link; /* on the queue, then on finished */
};

struct workers {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct rc_list queue;    /* FIFO: parts in order */
	struct rc_list finished; /* in the order they finished */
	bool stopping;
	int efd;
	unsigned pending; /* the reactor's count: submitted, not reaped */
	unsigned n_threads;
	pthread_t threads[MAX_WORKERS];
};

/* The first queued job and, where it has a kind, the queued jobs of that
 * kind after it (up to its max): 0 when stopping. */
static unsigned take_jobs(struct workers *w, struct job **out)
{
	pthread_mutex_lock(&w->lock);
	while (rc_list_empty(&w->queue) && !w->stopping)
		pthread_cond_wait(&w->cond, &w->lock);
	unsigned n = 0;
	struct rc_list *pos, *tmp;
	rc_list_for_each_safe(pos, tmp, &w->queue) {
		struct job *j = rc_list_entry(pos, struct job, link);
		if (n && j->kind != out[0]->kind) /* out[0] has a kind */
			continue;
		rc_list_del(&j->link);
		out[n++] = j;
		if (!j->kind || n == j->kind->max || n == WORKERS_MANY_MAX)
			break;
	}
	pthread_mutex_unlock(&w->lock);
	return n;
}

static void *worker_main(void *arg)
{
	struct workers *w = arg;
	struct job *jobs[WORKERS_MANY_MAX];
	unsigned n;
	while ((n = take_jobs(w, jobs))) {
		if (jobs[0]->kind) {
			void *args[WORKERS_MANY_MAX];
			for (unsigned i = 0; i < n; i++)
				args[i] = jobs[i]->arg;
			jobs[0]->kind->run_many(args, n);
		} else {
			jobs[0]->run(jobs[0]->arg);
		}
		pthread_mutex_lock(&w->lock);
		for (unsigned i = 0; i < n; i++)
			rc_list_add_tail(&w->finished, &jobs[i]->link);
		pthread_mutex_unlock(&w->lock);
		uint64_t one = 1;
		/* Only fails when the counter is saturated: it is set anyway. */
		(void)!write(w->efd, &one, sizeof(one));
	}
	return NULL;
}

struct workers *workers_new(unsigned n, const char *name)
{
	struct workers *w = calloc(1, sizeof(*w));
	if (!w)
		return NULL;
	pthread_mutex_init(&w->lock, NULL);
	pthread_cond_init(&w->cond, NULL);
	rc_list_init(&w->queue);
	rc_list_init(&w->finished);
	w->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (w->efd < 0) {
		workers_free(w);
		return NULL;
	}
	if (n < 1)
		n = 1;
	if (n > MAX_WORKERS)
		n = MAX_WORKERS;
	/* Signals are the reactor's (signalfd): the threads block them all,
	 * whatever the creating thread's mask is now. */
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	int r = 0;
	for (; w->n_threads < n && !r; w->n_threads++)
		r = pthread_create(&w->threads[w->n_threads], NULL, worker_main,
				   w);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (r) {
		w->n_threads--;
		workers_free(w);
		errno = r;
		return NULL;
	}
	for (unsigned i = 0; name && i < w->n_threads; i++) {
		char tn[32];
		snprintf(tn, sizeof(tn), "%.9s-w%u", name, i);
		tn[15] = '\0'; /* the kernel's limit */
		pthread_setname_np(w->threads[i], tn);
	}
	return w;
}


static void jobs_free(struct rc_list *jobs)
{
	struct rc_list *pos, *tmp;

	rc_list_for_each_safe(pos, tmp, jobs)
		free(rc_list_entry(pos, struct job, link));
	rc_list_init(jobs);
}

void workers_free(struct workers *w)
{
	if (!w)
		return;
	pthread_mutex_lock(&w->lock);
	w->stopping = true;
	jobs_free(&w->queue); /* never started: nobody waits for them */
	pthread_cond_broadcast(&w->cond);
	pthread_mutex_unlock(&w->lock);
	for (unsigned i = 0; i < w->n_threads; i++)
		pthread_join(w->threads[i], NULL);
	jobs_free(&w->finished);
	if (w->efd >= 0)
		close(w->efd);
	pthread_cond_destroy(&w->cond);
	pthread_mutex_destroy(&w->lock);
	free(w);
}

static int submit(struct workers *w, struct job init)
{
	struct job *j = malloc(sizeof(*j));
	if (!j)
		return -ENOMEM;
	*j = init;
	pthread_mutex_lock(&w->lock);
	rc_list_add_tail(&w->queue, &j->link);
	pthread_cond_signal(&w->cond);
	pthread_mutex_unlock(&w->lock);
	w->pending++;
	return 0;
}

int workers_submit(struct workers *w, void (*run)(void *arg),
		   void (*done)(void *arg), void *arg)
{
	return submit(w, (struct job){.run = run, .done = done, .arg = arg});
}

int workers_submit_kind(struct workers *w, const struct workers_kind *kind,
			void (*done)(void *arg), void *arg)
{
	return submit(w, (struct job){.kind = kind, .done = done, .arg = arg});
}

int workers_fd(const struct workers *w)
{
	return w->efd;
}

unsigned workers_reap(struct workers *w)
{
	uint64_t v;
	(void)!read(w->efd, &v, sizeof(v)); /* EAGAIN: nothing signalled */
	struct rc_list done = RC_LIST_INIT(done), *pos, *tmp;
	pthread_mutex_lock(&w->lock);
	rc_list_splice_tail(&done, &w->finished);
	pthread_mutex_unlock(&w->lock);
	unsigned n = 0;
	rc_list_for_each_safe(pos, tmp, &done) {
		struct job *j = rc_list_entry(pos, struct job, link);
		w->pending--;
		j->done(j->arg); /* may submit more: onto the queue, not done */
		free(j);
		n++;
	}
	return n;
}

unsigned workers_pending(const struct workers *w)
{
	return w->pending;
}
