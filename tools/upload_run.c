/* upload_run.c - owns the blocking way to drive the upload engine
 * (upload_run.h): a curl multi handle and a timer list on the calling
 * thread, and the jobs run to their end on it, for tools, tests and
 * benchmarks. The daemon drives the engine from its reactors instead. */
#include "upload_run.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "vec.h"

/* ---- the loop ----------------------------------------------------------- */

struct loop_timer {
	uint64_t due_ms;
	void (*cb)(void *);
	void *arg;
};

struct upload_loop {
	struct upload_driver drv;
	CURLM *multi;
	struct loop_timer *timers;
	size_t n_timers;
	uint32_t cap_timers;
	unsigned in_flight;
};

static int loop_add_transfer(void *ctx, struct s3_req *req)
{
	struct upload_loop *l = ctx;
	if (curl_multi_add_handle(l->multi, s3_req_easy(req)) != CURLM_OK)
		return -EIO;
	l->in_flight++;
	return 0;
}

static void loop_remove_transfer(void *ctx, struct s3_req *req)
{
	struct upload_loop *l = ctx;
	curl_multi_remove_handle(l->multi, s3_req_easy(req));
	l->in_flight--;
}

static int loop_add_timer(void *ctx, unsigned delay_ms, void (*cb)(void *),
			  void *arg)
{
	struct upload_loop *l = ctx;
	if (RC_GROW(l->timers, l->cap_timers, l->n_timers + 1))
		return -ENOMEM;
	l->timers[l->n_timers++] =
		(struct loop_timer){ rc_now_ms() + delay_ms, cb, arg };
	return 0;
}

static void loop_fire_timers(struct upload_loop *l)
{
	uint64_t now = rc_now_ms();
	for (size_t i = 0; i < l->n_timers;) {
		if (l->timers[i].due_ms > now) {
			i++;
			continue;
		}
		struct loop_timer t = l->timers[i];
		l->timers[i] = l->timers[--l->n_timers];
		t.cb(t.arg); /* may add timers: the scan goes on over them */
	}
}

struct upload_loop *upload_loop_new(void)
{
	struct upload_loop *l = calloc(1, sizeof(*l));
	if (!l)
		return NULL;
	l->multi = curl_multi_init();
	if (!l->multi) {
		free(l);
		return NULL;
	}
	l->drv = (struct upload_driver){ l, loop_add_transfer,
					 loop_remove_transfer, loop_add_timer,
					 NULL };
	return l;
}

void upload_loop_free(struct upload_loop *l)
{
	if (!l)
		return;
	curl_multi_cleanup(l->multi);
	free(l->timers);
	free(l);
}

const struct upload_driver *upload_loop_driver(struct upload_loop *l)
{
	return &l->drv;
}

unsigned upload_loop_in_flight(const struct upload_loop *l)
{
	return l->in_flight;
}

void upload_loop_turn(struct upload_loop *l)
{
	int running, left;
	CURLMsg *msg;

	loop_fire_timers(l);
	curl_multi_perform(l->multi, &running);
	while ((msg = curl_multi_info_read(l->multi, &left))) {
		if (msg->msg != CURLMSG_DONE)
			continue;
		struct s3_req *req = NULL;
		CURLcode code = msg->data.result;
		curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&req);
		curl_multi_remove_handle(l->multi, msg->easy_handle);
		l->in_flight--;
		upload_transfer_done(req, code);
	}
	/* Retry backoffs are short: wake for them rather than sleep 50 ms. */
	curl_multi_poll(l->multi, NULL, 0, l->n_timers ? 5 : 50, NULL);
}

/* ---- jobs run to their end ---------------------------------------------- */

static void run_done(void *ctx, const struct upload_outcome *out)
{
	*(struct upload_outcome *)ctx = *out;
}

/* One job of either kind (params non-NULL, or copy) on a private engine
 * and loop, until it is done and nothing of it is left. */
static int run_blocking(struct s3_client *s3, const char *daemon_id,
			const struct upload_params *params,
			const struct upload_copy_params *copy,
			struct upload_outcome *out)
{
	struct upload_loop *l = upload_loop_new();
	struct upload_engine *e =
		l ? upload_engine_new(s3, upload_loop_driver(l), daemon_id) : NULL;
	int err = -ENOMEM;
	struct upload *u = NULL;

	memset(out, 0, sizeof(*out));
	if (e && params)
		u = upload_start(e, params, &err);
	else if (e)
		u = upload_copy_start(e, copy, &err);
	if (u)
		while (upload_engine_active(e) || upload_engine_pending(e))
			upload_loop_turn(l);
	else
		out->err = err;
	if (e)
		upload_engine_free(e);
	upload_loop_free(l);
	return out->err;
}

int upload_run(struct s3_client *s3, const struct upload_params *p,
	       const char *daemon_id, struct upload_outcome *out)
{
	struct upload_params params = *p;
	params.done = run_done;
	params.done_ctx = out;
	return run_blocking(s3, daemon_id, &params, NULL, out);
}

int upload_copy_run(struct s3_client *s3, const struct upload_copy_params *p,
		    struct upload_outcome *out)
{
	struct upload_copy_params params = *p;
	params.done = run_done;
	params.done_ctx = out;
	return run_blocking(s3, NULL, NULL, &params, out);
}

int upload_rename_completed(struct s3_client *s3, const char *bucket,
			    const char *from_key, const char *to_key,
			    char *etag, size_t etaglen, struct s3_result *res)
{
	struct s3_req_params head = {
		.op = S3_HEAD_OBJECT, .bucket = bucket, .key = from_key,
	};
	int rc = s3_perform(s3, &head, res, NULL, NULL);
	if (rc < 0)
		return rc;
	struct upload_copy_params p = {
		.bucket = bucket, .from_key = from_key, .to_key = to_key,
		.size = res->object_size,
	};
	struct upload_outcome out;
	upload_copy_run(s3, &p, &out);
	upload_outcome_result(&out, res);
	if (etag && out.err == 0)
		snprintf(etag, etaglen, "%s", out.etag);
	return res->err;
}
