/* preflight.c - owns the check of each dataset's bucket before a client
 * asks (preflight.h): a blocking HeadBucket per dataset with its own
 * short-timeout S3 client, run inline (--check-config) or on a thread
 * (start, reload), so a shard's reactor never waits for it. */
#include "preflight.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cause.h"
#include "log.h"

/* Long enough for a far region, short enough that a dead endpoint costs
 * seconds, not the request_timeout_ms of a 64 MiB block. */
#define PREFLIGHT_CONNECT_MS 2000
#define PREFLIGHT_REQUEST_MS 5000

static struct s3_client *preflight_client(const struct rc_config *cfg,
					  struct creds_provider *creds,
					  char *err, size_t errlen)
{
	struct s3_config sc = {
		.endpoint = cfg->endpoint,
		.region = cfg->region,
		.addressing = cfg->addressing,
		.tls_verify = cfg->tls_verify,
		.ca_file = cfg->ca_file,
		.connect_timeout_ms = PREFLIGHT_CONNECT_MS,
		.request_timeout_ms = PREFLIGHT_REQUEST_MS,
		.low_speed_time_s = 5,
		.max_retries = 0,
		.backoff_base_ms = 50,
		.backoff_cap_ms = 50,
		.creds = creds,
	};
	return s3_client_new(&sc, err, errlen);
}

static void check_one(struct s3_client *s3, const char *name,
		      const char *bucket, const char *prefix,
		      preflight_report_fn report, void *ctx)
{
	/* HeadBucket: no key, no listing a test's S3 would count. Its 403
	 * has no body to say why, and a policy may grant ListBucket on the
	 * prefix alone: a one-key listing of the prefix decides. */
	struct s3_req_params p = {.op = S3_HEAD_BUCKET, .bucket = bucket};
	struct s3_result r;
	int err = s3_perform(s3, &p, &r, NULL, NULL);
	if ((err == -EPERM || err == -EIO) && !r.code[0] &&
	    (r.http_status == 403 || r.http_status == 400)) {
		p = (struct s3_req_params){.op = S3_LIST_OBJECTS_V2,
					   .bucket = bucket, .prefix = prefix,
					   .max_keys = 1};
		err = s3_perform(s3, &p, &r, NULL, NULL);
	}
	const char *endpoint = s3_client_endpoint(s3);
	char *text = NULL;
	if (err == 0) {
		if (asprintf(&text, "dataset %s, s3://%s/%s: the bucket is "
			     "there and readable at %s", name, bucket,
			     rc_esc(prefix), endpoint) < 0)
			text = NULL;
	} else {
		text = fetch_cause(name, bucket, prefix, endpoint, err, &r);
	}
	report(ctx, name, err, text ? text : "out of memory");
	free(text);
}

static void run(const struct rc_config *cfg, struct creds_provider *creds,
		preflight_report_fn report, void *ctx, atomic_bool *stop)
{
	char err[256];
	struct s3_client *s3 = preflight_client(cfg, creds, err, sizeof(err));
	if (!s3) {
		report(ctx, "", -EINVAL, err);
		return;
	}
	for (size_t i = 0; i < cfg->n_datasets && !(stop && atomic_load(stop));
	     i++) {
		const struct rc_dataset_config *d = &cfg->datasets[i];
		check_one(s3, d->name, d->bucket, d->prefix, report, ctx);
	}
	s3_client_free(s3);
}

void preflight_run(const struct rc_config *cfg, struct creds_provider *creds,
		   preflight_report_fn report, void *ctx)
{
	run(cfg, creds, report, ctx, NULL);
}

/* ---- on a thread ---------------------------------------------------------- */

struct preflight {
	pthread_t thread;
	atomic_bool done;
	atomic_bool stop;         /* preflight_join: no further dataset */
	struct rc_config cfg;     /* the parts preflight_run reads, copied */
	struct creds_provider *creds;
};

static void log_result(void *ctx, const char *dataset, int err,
		       const char *text)
{
	(void)ctx;
	(void)dataset;
	if (err)
		log_warn("preflight: %s (reads of this dataset fail so until "
			 "it is fixed)", text);
	else
		log_info("preflight: %s", text);
}

static void *preflight_main(void *arg)
{
	struct preflight *p = arg;
	run(&p->cfg, p->creds, log_result, NULL, &p->stop);
	atomic_store(&p->done, true);
	return NULL;
}

static void preflight_free(struct preflight *p)
{
	for (size_t i = 0; i < p->cfg.n_datasets; i++) {
		free(p->cfg.datasets[i].name);
		free(p->cfg.datasets[i].bucket);
		free(p->cfg.datasets[i].prefix);
	}
	free(p->cfg.datasets);
	free(p->cfg.endpoint);
	free(p->cfg.region);
	free(p->cfg.ca_file);
	free(p);
}

static char *dup_or_null(const char *s, bool *oom)
{
	char *d = s ? strdup(s) : NULL;
	*oom |= s && !d;
	return d;
}

static struct preflight *preflight_copy(const struct rc_config *cfg)
{
	struct preflight *p = calloc(1, sizeof(*p));
	bool oom = !p;
	if (oom)
		return NULL;
	p->cfg.endpoint = dup_or_null(cfg->endpoint, &oom);
	p->cfg.region = dup_or_null(cfg->region, &oom);
	p->cfg.ca_file = dup_or_null(cfg->ca_file, &oom);
	p->cfg.addressing = cfg->addressing;
	p->cfg.tls_verify = cfg->tls_verify;
	p->cfg.datasets = calloc(cfg->n_datasets ? cfg->n_datasets : 1,
				 sizeof(*p->cfg.datasets));
	oom |= !p->cfg.datasets;
	for (size_t i = 0; !oom && i < cfg->n_datasets; i++) {
		struct rc_dataset_config *d = &p->cfg.datasets[i];
		p->cfg.n_datasets++;
		d->name = dup_or_null(cfg->datasets[i].name, &oom);
		d->bucket = dup_or_null(cfg->datasets[i].bucket, &oom);
		d->prefix = dup_or_null(cfg->datasets[i].prefix, &oom);
	}
	if (oom) {
		preflight_free(p);
		return NULL;
	}
	return p;
}

struct preflight *preflight_start(struct preflight *p,
				  const struct rc_config *cfg,
				  struct creds_provider *creds)
{
	if (p && !atomic_load(&p->done)) {
		log_info("preflight: the last check still runs, this one is "
			 "skipped");
		return p;
	}
	preflight_join(p);
	struct preflight *n = preflight_copy(cfg);
	if (!n)
		return NULL;
	n->creds = creds;
	if (pthread_create(&n->thread, NULL, preflight_main, n) != 0) {
		preflight_free(n);
		return NULL;
	}
	return n;
}

void preflight_join(struct preflight *p)
{
	if (!p)
		return;
	atomic_store(&p->stop, true);
	pthread_join(p->thread, NULL);
	preflight_free(p);
}
