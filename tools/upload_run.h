/* upload_run.h - the upload engine (src/store/upload.h) driven on the
 * calling thread until its job is done: the blocking form tools (rc-s3
 * mpu-put), tests and benchmarks use. Never on a reactor thread: it waits
 * on S3. Compiled into its users (meson.build), not into the daemon. */
#ifndef RC_TOOLS_UPLOAD_RUN_H
#define RC_TOOLS_UPLOAD_RUN_H

#include <stddef.h>

#include "s3.h"
#include "upload.h"

/* A driver of one thread and no other work: a curl multi handle and a
 * timer list, run by curl_multi_poll. upload_run's loop, and a test's. */
struct upload_loop;
struct upload_loop *upload_loop_new(void);  /* NULL: out of memory */
void upload_loop_free(struct upload_loop *l);
const struct upload_driver *upload_loop_driver(struct upload_loop *l);
/* One turn: due timers, curl progress, completions, then a wait of at most
 * 50 ms for sockets. */
void upload_loop_turn(struct upload_loop *l);
/* Transfers added and not yet done or removed. */
unsigned upload_loop_in_flight(const struct upload_loop *l);

/* Blocking: one upload (p->done and p->done_ctx are ignored) on a private
 * upload_loop, parts p->concurrency at a time, until it is done and every
 * request and timer has ended. daemon_id as in upload_engine_new. Returns
 * out->err (0 or a negated errno, out filled); -ENOMEM before anything
 * was sent. */
int upload_run(struct s3_client *s3, const struct upload_params *p,
	       const char *daemon_id, struct upload_outcome *out);

/* Blocking: a copy job (p->done ignored) on a private upload_loop, as
 * upload_run. Returns out->err. */
int upload_copy_run(struct s3_client *s3, const struct upload_copy_params *p,
		    struct upload_outcome *out);

/* Blocking: rename a completed object: a HEAD for its size, then
 * upload_copy_run with the defaults. etag (may be NULL) receives the new
 * object's ETag. 0 or a negated errno (res filled; a failed DELETE of the
 * source is its error, the copy then stands). */
int upload_rename_completed(struct s3_client *s3, const char *bucket,
			    const char *from_key, const char *to_key,
			    char *etag, size_t etaglen, struct s3_result *res);

#endif
