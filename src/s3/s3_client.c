/* s3_client.c - owns the S3 client: the endpoint parsed into scheme and
 * Host (libcurl's URL parser), the region, the defaults of the timeouts
 * and retry policy, and the owned copies of the config's strings. */
#include "s3_private.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "s3.h"
#include "s3_reach.h"


static char *dup_or_null(const char *s, bool *oom)
{
	if (!s)
		return NULL;
	char *d = strdup(s);
	if (!d)
		*oom = true;
	return d;
}

/* Splits the endpoint with libcurl's URL parser (IPv6 literals, userinfo
 * and friends are its problem, not a hand-rolled scanner's). */
static int parse_endpoint(struct s3_client *c, char *err, size_t errlen)
{
	CURLU *u = curl_url();
	char *scheme = NULL, *host = NULL, *port = NULL, *path = NULL;
	int rc = -1;

	if (!u) {
		rc_set_err(err, errlen, "out of memory");
		return -1;
	}
	if (curl_url_set(u, CURLUPART_URL, c->endpoint, 0) != CURLUE_OK ||
	    curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) != CURLUE_OK ||
	    curl_url_get(u, CURLUPART_HOST, &host, 0) != CURLUE_OK) {
		rc_set_err(err, errlen, "s3 endpoint '%s' is not a URL", c->endpoint);
		goto out;
	}
	if (strcmp(scheme, "http") != 0 && strcmp(scheme, "https") != 0) {
		rc_set_err(err, errlen, "s3 endpoint '%s': scheme must be http or https",
			c->endpoint);
		goto out;
	}
	if (curl_url_get(u, CURLUPART_PATH, &path, 0) == CURLUE_OK &&
	    strcmp(path, "/") != 0 && path[0] != '\0') {
		rc_set_err(err, errlen, "s3 endpoint '%s' must not have a path",
			c->endpoint);
		goto out;
	}
	CURLUcode pc = curl_url_get(u, CURLUPART_PORT, &port, 0);
	bool default_port = pc != CURLUE_OK ||
		(strcmp(scheme, "http") == 0 && strcmp(port, "80") == 0) ||
		(strcmp(scheme, "https") == 0 && strcmp(port, "443") == 0);
	size_t hlen = strlen(host) + (port ? strlen(port) : 0) + 2;
	c->host = malloc(hlen);
	c->scheme = strdup(scheme);
	if (!c->host || !c->scheme) {
		rc_set_err(err, errlen, "out of memory");
		goto out;
	}
	if (default_port)
		snprintf(c->host, hlen, "%s", host);
	else
		snprintf(c->host, hlen, "%s:%s", host, port);
	rc = 0;
out:
	curl_free(scheme);
	curl_free(host);
	curl_free(port);
	curl_free(path);
	curl_url_cleanup(u);
	return rc;
}

static void apply_defaults(struct s3_config *cfg)
{
	if (!cfg->connect_timeout_ms)
		cfg->connect_timeout_ms = 3000;
	if (!cfg->request_timeout_ms)
		cfg->request_timeout_ms = 30000;
	if (!cfg->low_speed_time_s)
		cfg->low_speed_time_s = 10;
	if (!cfg->backoff_base_ms)
		cfg->backoff_base_ms = 50;
	if (!cfg->retry_budget_ms)
		cfg->retry_budget_ms = 60000;
	if (!cfg->write_retry_budget_ms)
		cfg->write_retry_budget_ms =
			cfg->retry_budget_ms > UINT_MAX / 5 ?
			UINT_MAX : 5 * cfg->retry_budget_ms;
	/* AWS's guidance caps a try's wait at 20 s; a short budget caps it
	 * lower so a request still gets a few spread tries inside it. */
	if (!cfg->backoff_cap_ms) {
		unsigned cap = cfg->retry_budget_ms / 3;
		cfg->backoff_cap_ms = cap < cfg->backoff_base_ms ?
			cfg->backoff_base_ms : cap > 20000 ? 20000 : cap;
	}
}

struct s3_client *s3_client_new(const struct s3_config *cfg, char *err,
				size_t errlen)
{
	bool oom = false;
	const char *region = cfg->region && *cfg->region ? cfg->region : "us-east-1";

	if (strlen(region) > 64 || strpbrk(region, "/ \r\n")) {
		rc_set_err(err, errlen, "s3 region '%s' is not valid", region);
		return NULL;
	}
	struct s3_client *c = calloc(1, sizeof(*c));
	if (!c) {
		rc_set_err(err, errlen, "out of memory");
		return NULL;
	}
	c->cfg = *cfg;
	s3_reach_init(c);
	c->region = dup_or_null(region, &oom);
	c->ca_file = cfg->ca_file && *cfg->ca_file ? dup_or_null(cfg->ca_file, &oom) : NULL;
	if (cfg->endpoint && *cfg->endpoint) {
		c->endpoint = dup_or_null(cfg->endpoint, &oom);
	} else if (c->region && asprintf(&c->endpoint, "https://s3.%s.amazonaws.com",
					 c->region) < 0) {
		c->endpoint = NULL;
		oom = true;
	}
	if (oom) {
		rc_set_err(err, errlen, "out of memory");
		s3_client_free(c);
		return NULL;
	}
	if (parse_endpoint(c, err, errlen) < 0) {
		s3_client_free(c);
		return NULL;
	}
	c->cfg.endpoint = c->endpoint;
	c->cfg.region = c->region;
	c->cfg.ca_file = c->ca_file;
	apply_defaults(&c->cfg);
	return c;
}

void s3_client_free(struct s3_client *c)
{
	if (!c)
		return;
	free(c->endpoint);
	free(c->region);
	free(c->ca_file);
	free(c->scheme);
	free(c->host);
	s3_reach_destroy(c);
	free(c);
}

const char *s3_client_endpoint(const struct s3_client *c)
{
	return c->endpoint;
}

const struct s3_config *s3_client_config(const struct s3_client *c)
{
	return &c->cfg;
}

