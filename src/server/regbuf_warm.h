/* regbuf_warm.h - owns mapping a registered buffer's pages into the
 * daemon's page tables off the reactor (issue 21).
 *
 * Why: REGISTER_BUF maps a client's memfd without populating it (a sparse
 * buffer of any size would otherwise cost the daemon its whole size, see
 * docs/SECURITY.md), so the first copy out of each page faults it in on
 * the reactor thread, inside the writer's blocked window: ~8,200 faults
 * per 8 x 64 MiB checkpoint save, the page-table work a VM makes dear.
 * A warm job does it at registration on the shard's worker threads, for
 * the pages the client's memfd already holds only (its data extents), so a sparse
 * buffer still costs nothing; the copies then find the pages mapped.
 *
 * Ownership: a job holds its session (a reference) until its done
 * callback on the reactor. UNREGISTER_BUF during a job leaves the munmap
 * to the job (regbuf_warm_unmap), which stops at its next window. */
#ifndef RC_REGBUF_WARM_H
#define RC_REGBUF_WARM_H

#include <stdbool.h>

struct session;
struct regbuf;

/* Starts the job for b (just mapped from the memfd fd, in s->bufs) if
 * the shard has worker threads; without them the pages fault in as copies
 * reach them. The job keeps a dup of fd to find the memfd's data, takes a
 * reference on s and drops both in its done (put: session_put). */
void regbuf_warm_start(struct session *s, struct regbuf *b, int fd,
		       void (*put)(struct session *s));

/* The session closes: its jobs stop at their next window (their done
 * still runs, and drops the session's reference). */
void regbuf_warm_stop(struct session *s);

/* UNREGISTER_BUF of b: true if a job runs over it and takes its munmap
 * over (the caller then only forgets b), false if the caller unmaps. */
bool regbuf_warm_unmap(struct regbuf *b);

#endif
