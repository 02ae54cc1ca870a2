/* test_creds.c - the credential chain: config, environment, shared
 * credentials file and profiles, the container endpoint and IMDSv2 (both
 * served by a small HTTP server thread on 127.0.0.1), expiry-driven
 * refresh, and malformed responses. Criterion runs each test in its own
 * process, so setenv() here does not leak between tests. */
#include <criterion/criterion.h>

#include <arpa/inet.h>
#include <errno.h>
#include <ftw.h>
#include <netinet/in.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "creds.h"

/* ---- a one-request-per-connection HTTP server ---- */

struct http_req {
	char method[8];
	char path[256];
	char raw[8192]; /* request line and headers */
};

struct server;
typedef int (*route_fn)(struct server *s, const struct http_req *r,
			char *body, size_t cap);

struct server {
	int fd;
	int port;
	pthread_t thread;
	route_fn route;
	pthread_mutex_t mu;
	int hits;             /* requests served */
	int creds_served;     /* credential documents served */
	char last_auth[256];  /* Authorization header of the last request */
	const char *const *bodies; /* for route_bodies: served in turn */
};

static struct server srv;

/* Returns the value of header name in r (case-insensitive), or "". */
static void header_value(const struct http_req *r, const char *name,
			 char *out, size_t cap)
{
	const char *p = strstr(r->raw, "\r\n");
	size_t n = strlen(name);

	out[0] = '\0';
	while (p && p[2]) {
		p += 2;
		if (!strncasecmp(p, name, n) && p[n] == ':') {
			const char *v = p + n + 1, *e = strstr(v, "\r\n");

			while (*v == ' ')
				v++;
			snprintf(out, cap, "%.*s", (int)(e ? e - v : 0), v);
			return;
		}
		p = strstr(p, "\r\n");
	}
}

static int read_request(int c, struct http_req *r)
{
	size_t len = 0;

	memset(r, 0, sizeof(*r));
	while (!strstr(r->raw, "\r\n\r\n")) {
		ssize_t n = read(c, r->raw + len, sizeof(r->raw) - 1 - len);

		if (n <= 0)
			return -1;
		len += (size_t)n;
		r->raw[len] = '\0';
	}
	return sscanf(r->raw, "%7s %255s", r->method, r->path) == 2 ? 0 : -1;
}

static void serve_one(int c)
{
	struct http_req r;
	char body[8192], head[256];
	int status;

	if (read_request(c, &r))
		return;
	pthread_mutex_lock(&srv.mu);
	srv.hits++;
	header_value(&r, "Authorization", srv.last_auth,
		     sizeof(srv.last_auth));
	body[0] = '\0';
	status = srv.route(&srv, &r, body, sizeof(body));
	pthread_mutex_unlock(&srv.mu);
	snprintf(head, sizeof(head), "HTTP/1.1 %d X\r\nContent-Length: %zu\r\n"
		 "Connection: close\r\n\r\n", status, strlen(body));
	if (write(c, head, strlen(head)) < 0 ||
	    write(c, body, strlen(body)) < 0)
		return;
}

static void *server_main(void *arg)
{
	(void)arg;
	for (;;) {
		int c = accept(srv.fd, NULL, NULL);

		if (c < 0)
			return NULL; /* the listener was shut down */
		serve_one(c);
		close(c);
	}
}

static void server_start(route_fn route)
{
	struct sockaddr_in a = { .sin_family = AF_INET };
	socklen_t alen = sizeof(a);

	pthread_mutex_init(&srv.mu, NULL);
	srv.route = route;
	srv.fd = socket(AF_INET, SOCK_STREAM, 0);
	cr_assert_geq(srv.fd, 0);
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	cr_assert_eq(bind(srv.fd, (struct sockaddr *)&a, sizeof(a)), 0);
	cr_assert_eq(listen(srv.fd, 16), 0);
	cr_assert_eq(getsockname(srv.fd, (struct sockaddr *)&a, &alen), 0);
	srv.port = ntohs(a.sin_port);
	cr_assert_eq(pthread_create(&srv.thread, NULL, server_main, NULL), 0);
}

static void server_stop(void)
{
	shutdown(srv.fd, SHUT_RDWR);
	pthread_join(srv.thread, NULL);
	close(srv.fd);
}

static void server_url(char *out, size_t cap, const char *path)
{
	snprintf(out, cap, "http://127.0.0.1:%d%s", srv.port, path);
}

static void iso8601(time_t t, char *out, size_t cap)
{
	struct tm tm;

	gmtime_r(&t, &tm);
	strftime(out, cap, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

static int creds_doc(char *body, size_t cap, const char *ak, time_t expires)
{
	char exp[32];

	iso8601(expires, exp, sizeof(exp));
	snprintf(body, cap,
		 "{\n  \"Code\" : \"Success\",\n  \"Type\": \"AWS-HMAC\",\n"
		 "  \"AccessKeyId\": \"%s\",\n"
		 "  \"SecretAccessKey\": \"se\\/cr\\\"et\\\\\\u00e9\",\n"
		 "  \"Token\": \"TOKEN-%s\",\n  \"Expiration\": \"%s\",\n"
		 "  \"Nested\": {\"a\": [1, 2.5e3, true, null]}\n}",
		 ak, ak, exp);
	srv.creds_served++;
	return 200;
}

/* ---- environment helpers ---- */

static char tmpdir[64];

static int remove_entry(const char *path, const struct stat *st, int flag,
			struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	remove(path);
	return 0;
}

static void remove_tmpdir(void)
{
	nftw(tmpdir, remove_entry, 8, FTW_DEPTH | FTW_PHYS);
}

static void clean_env(void)
{
	static const char *const vars[] = {
		"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
		"AWS_SESSION_TOKEN", "AWS_PROFILE",
		"AWS_SHARED_CREDENTIALS_FILE",
		"AWS_CONTAINER_CREDENTIALS_FULL_URI",
		"AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
		"AWS_CONTAINER_AUTHORIZATION_TOKEN",
		"AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE",
		"AWS_EC2_METADATA_DISABLED",
	};

	for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++)
		unsetenv(vars[i]);
	strcpy(tmpdir, "/tmp/rc-creds-XXXXXX");
	cr_assert_not_null(mkdtemp(tmpdir));
	atexit(remove_tmpdir);
	/* No ~/.aws/credentials of the machine's user can interfere. */
	setenv("HOME", tmpdir, 1);
}

static void write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");

	cr_assert_not_null(f);
	cr_assert_eq(fputs(text, f) >= 0, 1);
	cr_assert_eq(fclose(f), 0);
}

/* A closed local port: the chain's last step fails at once. */
static const char *dead_imds = "http://127.0.0.1:1";

static void expect_key(struct creds_provider *p, const char *ak,
		       const char *sk, const char *token)
{
	struct rc_creds c;
	int anon = -1;

	cr_assert_eq(creds_get(p, &c, &anon), 0);
	cr_assert_eq(anon, 0);
	cr_assert_str_eq(c.access_key, ak);
	cr_assert_str_eq(c.secret_key, sk);
	cr_assert_str_eq(c.session_token, token);
}

/* ---- config, environment, file ---- */

Test(chain, config_beats_env)
{
	struct creds_config cfg = { .access_key = "CFGKEY",
				    .secret_key = "cfgsecret",
				    .imds_endpoint = dead_imds };
	struct creds_provider *p;
	char err[256];

	clean_env();
	setenv("AWS_ACCESS_KEY_ID", "ENVKEY", 1);
	setenv("AWS_SECRET_ACCESS_KEY", "envsecret", 1);
	p = creds_provider_new(&cfg, err, sizeof(err));
	cr_assert_not_null(p, "%s", err);
	cr_assert_str_eq(creds_source_name(p), "config");
	expect_key(p, "CFGKEY", "cfgsecret", "");
	creds_provider_free(p);
}

Test(chain, env_when_config_empty)
{
	struct creds_config cfg = { .imds_endpoint = dead_imds };
	struct creds_provider *p;
	char err[256];

	clean_env();
	setenv("AWS_ACCESS_KEY_ID", "ENVKEY", 1);
	setenv("AWS_SECRET_ACCESS_KEY", "envsecret", 1);
	setenv("AWS_SESSION_TOKEN", "envtoken", 1);
	p = creds_provider_new(&cfg, err, sizeof(err));
	cr_assert_not_null(p, "%s", err);
	cr_assert_str_eq(creds_source_name(p), "env");
	expect_key(p, "ENVKEY", "envsecret", "envtoken");
	creds_provider_free(p);
}

Test(chain, partial_env_is_an_error)
{
	struct creds_config cfg = { .imds_endpoint = dead_imds };
	char err[256] = "";

	clean_env();
	setenv("AWS_ACCESS_KEY_ID", "ENVKEY", 1);
	cr_assert_null(creds_provider_new(&cfg, err, sizeof(err)));
	cr_assert(strstr(err, "AWS_SECRET_ACCESS_KEY"), "%s", err);
}

Test(chain, config_only_mode_without_keys_fails)
{
	struct creds_config cfg = { .source = CREDS_CONFIG };
	char err[256] = "";

	clean_env();
	setenv("AWS_ACCESS_KEY_ID", "ENVKEY", 1);
	setenv("AWS_SECRET_ACCESS_KEY", "envsecret", 1);
	cr_assert_null(creds_provider_new(&cfg, err, sizeof(err)));
	cr_assert(strstr(err, "access_key"), "%s", err);
}

Test(chain, file_profile_selection)
{
	struct creds_config cfg = { .imds_endpoint = dead_imds };
	struct creds_provider *p;
	char path[128], text[4096], token[1501], err[256];

	clean_env();
	/* A 1.5 KiB token: longer than a config line may be. */
	memset(token, 'Z', sizeof(token) - 1);
	token[sizeof(token) - 1] = '\0';
	snprintf(path, sizeof(path), "%s/creds", tmpdir);
	snprintf(text, sizeof(text),
		 "# comment\n[default]\naws_access_key_id = DEFKEY\n"
		 "aws_secret_access_key = defsecret\n\n[work]\n"
		 "region = eu-west-1\naws_access_key_id=WORKKEY\n"
		 "aws_secret_access_key=  work/secret+x  \n"
		 "aws_session_token = %s\n", token);
	write_file(path, text);
	setenv("AWS_SHARED_CREDENTIALS_FILE", path, 1);

	p = creds_provider_new(&cfg, err, sizeof(err));
	cr_assert_not_null(p, "%s", err);
	cr_assert_str_eq(creds_source_name(p), "file");
	expect_key(p, "DEFKEY", "defsecret", "");
	creds_provider_free(p);

	setenv("AWS_PROFILE", "work", 1);
	p = creds_provider_new(&cfg, err, sizeof(err));
	cr_assert_not_null(p, "%s", err);
	expect_key(p, "WORKKEY", "work/secret+x", token);
	creds_provider_free(p);

	/* The config's profile beats AWS_PROFILE. */
	cfg.profile = "default";
	p = creds_provider_new(&cfg, err, sizeof(err));
	cr_assert_not_null(p, "%s", err);
	expect_key(p, "DEFKEY", "defsecret", "");
	creds_provider_free(p);
}

Test(chain, missing_profile_names_it)
{
	struct creds_config cfg = { .imds_endpoint = dead_imds };
	char path[128], err[256] = "";

	clean_env();
	snprintf(path, sizeof(path), "%s/.aws", tmpdir);
	cr_assert_eq(mkdir(path, 0700), 0);
	strcat(path, "/credentials");
	write_file(path, "[default]\naws_access_key_id = K\n"
			 "aws_secret_access_key = hushhush\n");
	setenv("AWS_PROFILE", "nosuchprofile", 1);
	cr_assert_null(creds_provider_new(&cfg, err, sizeof(err)));
	cr_assert(strstr(err, "nosuchprofile"), "%s", err);
	cr_assert(strstr(err, path), "%s", err);
	cr_assert_null(strstr(err, "hushhush"));
}

Test(chain, profile_without_secret_is_an_error)
{
	struct creds_config cfg = { .source = CREDS_FILE };
	char path[128], err[256] = "";

	clean_env();
	snprintf(path, sizeof(path), "%s/c", tmpdir);
	write_file(path, "[default]\naws_access_key_id = ONLYKEY\n");
	cfg.credentials_file = path;
	cr_assert_null(creds_provider_new(&cfg, err, sizeof(err)));
	cr_assert(strstr(err, "aws_secret_access_key"), "%s", err);
}

Test(chain, nothing_configured_gives_clear_error)
{
	struct creds_config cfg = { .imds_endpoint = dead_imds };
	char err[512] = "";

	clean_env();
	cr_assert_null(creds_provider_new(&cfg, err, sizeof(err)));
	cr_assert(strstr(err, "no AWS credentials"), "%s", err);
	cr_assert(strstr(err, "IMDS"), "%s", err);
}

Test(chain, anonymous)
{
	struct creds_config cfg = { .source = CREDS_ANONYMOUS };
	struct creds_provider *p;
	struct rc_creds c;
	int anon = 0;

	clean_env();
	p = creds_provider_new(&cfg, NULL, 0);
	cr_assert_not_null(p);
	cr_assert_eq(creds_get(p, &c, &anon), 0);
	cr_assert_eq(anon, 1);
	cr_assert_str_eq(c.access_key, "");
	cr_assert_str_eq(creds_source_name(p), "anonymous");
	creds_provider_free(p);
}

/* ---- container endpoint ---- */

static int route_container(struct server *s, const struct http_req *r,
			   char *body, size_t cap)
{
	(void)s;
	if (strcmp(r->method, "GET") || strcmp(r->path, "/creds"))
		return 404;
	return creds_doc(body, cap, "CONTKEY", time(NULL) + 3600);
}

Test(container, full_uri_with_token)
{
	struct creds_config cfg = { .imds_endpoint = dead_imds };
	struct creds_provider *p;
	struct rc_creds c;
	char url[128], err[256];
	time_t now = time(NULL);

	clean_env();
	server_start(route_container);
	server_url(url, sizeof(url), "/creds");
	setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", url, 1);
	setenv("AWS_CONTAINER_AUTHORIZATION_TOKEN", "Bearer pod-token", 1);
	p = creds_provider_new(&cfg, err, sizeof(err));
	cr_assert_not_null(p, "%s", err);
	cr_assert_str_eq(creds_source_name(p), "container");
	cr_assert_str_eq(srv.last_auth, "Bearer pod-token");
	/* The JSON escapes \/ \" \\ \u00e9 are decoded. */
	expect_key(p, "CONTKEY", "se/cr\"et\\\xc3\xa9", "TOKEN-CONTKEY");
	cr_assert_eq(creds_get(p, &c, NULL), 0);
	cr_assert(c.expires >= now + 3600 && c.expires <= now + 3602);
	/* Not within 5 minutes of expiry: no second fetch. */
	cr_assert_eq(srv.hits, 1);
	creds_provider_free(p);
	server_stop();
}

Test(container, token_file)
{
	struct creds_config cfg = { .source = CREDS_CONTAINER };
	struct creds_provider *p;
	char url[128], path[128], err[256];

	clean_env();
	server_start(route_container);
	server_url(url, sizeof(url), "/creds");
	snprintf(path, sizeof(path), "%s/token", tmpdir);
	write_file(path, "file-token\n");
	setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", url, 1);
	setenv("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", path, 1);
	p = creds_provider_new(&cfg, err, sizeof(err));
	cr_assert_not_null(p, "%s", err);
	cr_assert_str_eq(srv.last_auth, "file-token");
	creds_provider_free(p);
	server_stop();
}

static int route_expiring(struct server *s, const struct http_req *r,
			  char *body, size_t cap)
{
	(void)r;
	/* First a key expiring in one minute, then a fresh one. */
	if (s->creds_served == 0)
		return creds_doc(body, cap, "OLDKEY", time(NULL) + 60);
	return creds_doc(body, cap, "NEWKEY", time(NULL) + 3600);
}

Test(container, refresh_before_expiry)
{
	struct creds_config cfg = { .source = CREDS_CONTAINER };
	struct creds_provider *p;
	struct rc_creds c;
	char url[128], err[256];

	clean_env();
	server_start(route_expiring);
	server_url(url, sizeof(url), "/creds");
	setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", url, 1);
	p = creds_provider_new(&cfg, err, sizeof(err));
	cr_assert_not_null(p, "%s", err);
	cr_assert_eq(srv.creds_served, 1);
	/* The refresh runs on the helper thread: the old key meanwhile. */
	cr_assert_eq(creds_get(p, &c, NULL), 0);
	creds_wait_refresh(p);
	cr_assert_eq(creds_get(p, &c, NULL), 0);
	cr_assert_str_eq(c.access_key, "NEWKEY");
	cr_assert_eq(srv.creds_served, 2);
	/* The new key lasts an hour: no further fetch. */
	cr_assert_eq(creds_get(p, &c, NULL), 0);
	cr_assert_str_eq(c.access_key, "NEWKEY");
	cr_assert_eq(srv.creds_served, 2);
	creds_provider_free(p);
	server_stop();
}

static int route_fail_after_first(struct server *s, const struct http_req *r,
				  char *body, size_t cap)
{
	(void)r;
	if (s->creds_served == 0)
		return creds_doc(body, cap, "OLDKEY", time(NULL) + 60);
	return 500;
}

Test(container, failed_refresh_keeps_valid_creds)
{
	struct creds_config cfg = { .source = CREDS_CONTAINER };
	struct creds_provider *p;
	struct rc_creds c;
	char url[128], err[256];

	clean_env();
	server_start(route_fail_after_first);
	server_url(url, sizeof(url), "/creds");
	setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", url, 1);
	p = creds_provider_new(&cfg, err, sizeof(err));
	cr_assert_not_null(p, "%s", err);
	cr_assert_eq(creds_get(p, &c, NULL), 0);
	creds_wait_refresh(p);
	cr_assert_eq(creds_get(p, &c, NULL), 0);
	cr_assert_str_eq(c.access_key, "OLDKEY");
	cr_assert_eq(srv.hits, 2);
	/* Within the retry back-off: no new request. */
	cr_assert_eq(creds_get(p, &c, NULL), 0);
	cr_assert_eq(srv.hits, 2);
	creds_provider_free(p);
	server_stop();
}

/* The refresh's request is held until the test opens the gate: a
 * creds_get that waited for it would never return (the test times out). */
static sem_t gate;

static int route_gated(struct server *s, const struct http_req *r,
		       char *body, size_t cap)
{
	(void)r;
	if (s->creds_served == 0)
		return creds_doc(body, cap, "OLDKEY", time(NULL) + 60);
	while (sem_wait(&gate) < 0)
		;
	return creds_doc(body, cap, "NEWKEY", time(NULL) + 3600);
}

Test(container, refresh_never_blocks_the_caller, .timeout = 30)
{
	struct creds_config cfg = { .source = CREDS_CONTAINER };
	struct creds_provider *p;
	struct rc_creds c;
	char url[128], err[256];

	clean_env();
	cr_assert_eq(sem_init(&gate, 0, 0), 0);
	server_start(route_gated);
	server_url(url, sizeof(url), "/creds");
	setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", url, 1);
	p = creds_provider_new(&cfg, err, sizeof(err));
	cr_assert_not_null(p, "%s", err);
	/* Twice while the endpoint holds the refresh: the old key at once,
	 * and one refresh in flight, not two. */
	for (int i = 0; i < 2; i++) {
		cr_assert_eq(creds_get(p, &c, NULL), 0);
		cr_assert_str_eq(c.access_key, "OLDKEY");
	}
	sem_post(&gate);
	creds_wait_refresh(p);
	cr_assert_eq(creds_get(p, &c, NULL), 0);
	cr_assert_str_eq(c.access_key, "NEWKEY");
	cr_assert_eq(srv.hits, 2);
	creds_provider_free(p);
	server_stop();
	sem_destroy(&gate);
}

static const char *const malformed_docs[] = {
	"{\"AccessKeyId\":\"AK\",\"SecretAccessKey\":\"SUPERSECRET",
	"{\"AccessKeyId\":\"AK\",\"SecretAccessKey\":\"SUPERSECRET\"",
	"{\"AccessKeyId\":\"AK\" \"SecretAccessKey\":\"SUPERSECRET\"}",
	"{\"AccessKeyId\":\"AK\",\"SecretAccessKey\":\"SUPERSECRET\"}x",
	"{\"AccessKeyId\":\"A\\qK\",\"SecretAccessKey\":\"SUPERSECRET\"}",
	"{\"AccessKeyId\":\"A\\ud800K\",\"SecretAccessKey\":\"SUPERSECRET\"}",
	"{\"AccessKeyId\":\"A\\u0000K\",\"SecretAccessKey\":\"SUPERSECRET\"}",
	"{\"AccessKeyId\":\"AK\",\"SecretAccessKey\":\"SUPERSECRET\","
	"\"x\":[1,}",
	"[\"AccessKeyId\",\"SUPERSECRET\"]",
	"{\"AccessKeyId\":\"AK\",\"SecretAccessKey\":\"SUPERSECRET\","
	"\"Expiration\":\"tomorrow\"}",
	"{\"AccessKeyId\":\"AK\"}",
	"{\"Code\":\"Failure\",\"AccessKeyId\":\"AK\","
	"\"SecretAccessKey\":\"SUPERSECRET\"}",
	"",
};

static int route_malformed(struct server *s, const struct http_req *r,
			   char *body, size_t cap)
{
	(void)r;
	snprintf(body, cap, "%s", malformed_docs[s->hits - 1]);
	return 200;
}

Test(container, malformed_json_is_an_error)
{
	struct creds_config cfg = { .source = CREDS_CONTAINER };
	char url[128], err[256];
	size_t n = sizeof(malformed_docs) / sizeof(malformed_docs[0]);

	clean_env();
	server_start(route_malformed);
	server_url(url, sizeof(url), "/creds");
	setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", url, 1);
	for (size_t i = 0; i < n; i++) {
		err[0] = '\0';
		cr_assert_null(creds_provider_new(&cfg, err, sizeof(err)),
			       "document %zu accepted", i);
		cr_assert(strstr(err, "container credentials"), "%zu: %s", i,
			  err);
		cr_assert_null(strstr(err, "SUPERSECRET"), "%s", err);
	}
	cr_assert_eq(srv.hits, (int)n);
	server_stop();
}

Test(container, http_error_status)
{
	struct creds_config cfg = { .imds_endpoint = dead_imds };
	char url[128], err[256] = "";

	clean_env();
	server_start(route_container);
	server_url(url, sizeof(url), "/wrong-path");
	setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", url, 1);
	/* A configured container endpoint that fails ends the chain. */
	cr_assert_null(creds_provider_new(&cfg, err, sizeof(err)));
	cr_assert(strstr(err, "HTTP 404"), "%s", err);
	server_stop();
}

/* ---- IMDSv2 ---- */

static int route_imds(struct server *s, const struct http_req *r,
		      char *body, size_t cap)
{
	char v[128];

	(void)s;
	if (!strcmp(r->method, "PUT") &&
	    !strcmp(r->path, "/latest/api/token")) {
		header_value(r, "X-aws-ec2-metadata-token-ttl-seconds", v,
			     sizeof(v));
		if (strcmp(v, "21600"))
			return 400;
		snprintf(body, cap, "SESSION-TOKEN-1");
		return 200;
	}
	header_value(r, "X-aws-ec2-metadata-token", v, sizeof(v));
	if (strcmp(v, "SESSION-TOKEN-1") || strcmp(r->method, "GET"))
		return 401;
	if (!strcmp(r->path, "/latest/meta-data/iam/security-credentials/")) {
		snprintf(body, cap, "my-role\n");
		return 200;
	}
	if (!strcmp(r->path,
		    "/latest/meta-data/iam/security-credentials/my-role"))
		return creds_doc(body, cap, "IMDSKEY", time(NULL) + 6 * 3600);
	return 404;
}

Test(imds, token_role_and_credentials)
{
	struct creds_config cfg = { 0 };
	struct creds_provider *p;
	char url[128], err[256];

	clean_env();
	server_start(route_imds);
	server_url(url, sizeof(url), "/");
	cfg.imds_endpoint = url;
	p = creds_provider_new(&cfg, err, sizeof(err));
	cr_assert_not_null(p, "%s", err);
	cr_assert_str_eq(creds_source_name(p), "imds");
	expect_key(p, "IMDSKEY", "se/cr\"et\\\xc3\xa9", "TOKEN-IMDSKEY");
	cr_assert_eq(srv.hits, 3);
	creds_provider_free(p);
	server_stop();
}

static int route_imds_no_role(struct server *s, const struct http_req *r,
			      char *body, size_t cap)
{
	if (!strcmp(r->method, "PUT"))
		return route_imds(s, r, body, cap);
	return 404;
}

Test(imds, no_role_attached)
{
	struct creds_config cfg = { .source = CREDS_IMDS };
	char url[128], err[256] = "";

	clean_env();
	server_start(route_imds_no_role);
	server_url(url, sizeof(url), "");
	cfg.imds_endpoint = url;
	cr_assert_null(creds_provider_new(&cfg, err, sizeof(err)));
	cr_assert(strstr(err, "no IAM role"), "%s", err);
	server_stop();
}

Test(imds, disabled_by_env)
{
	struct creds_config cfg = { .source = CREDS_IMDS };
	char err[256] = "";

	clean_env();
	setenv("AWS_EC2_METADATA_DISABLED", "true", 1);
	cfg.imds_endpoint = dead_imds;
	cr_assert_null(creds_provider_new(&cfg, err, sizeof(err)));
	cr_assert(strstr(err, "AWS_EC2_METADATA_DISABLED"), "%s", err);
}

/* ---- the credential document itself (creds_parse_json) ---- */

static int parse_doc(const char *doc, struct rc_creds *c, char *err,
		     size_t errlen)
{
	return creds_parse_json(doc, strlen(doc), c, err, errlen);
}

Test(document, members_other_than_the_wanted_are_skipped)
{
	struct rc_creds c;
	char err[256] = "";

	cr_assert_eq(parse_doc("{\"Nested\":{\"a\":[1,2,{\"b\":null}]},"
			       "\"AccessKeyId\":\"AK\",\"Type\":true,"
			       "\"SecretAccessKey\":\"S\\u00e9\","
			       "\"Expiration\":\"2030-01-02T03:04:05.123+01:30\"}",
			       &c, err, sizeof(err)), 0, "%s", err);
	cr_assert_str_eq(c.access_key, "AK");
	cr_assert_str_eq(c.secret_key, "S\xc3\xa9");
	cr_assert_str_eq(c.session_token, "");
	/* 2030-01-02T01:34:05Z */
	cr_assert_eq(c.expires, (time_t)1893548045);
}

/* The offset forms the AWS SDKs read: Z, +hh:mm, -hhmm, no fraction. */
Test(document, expiration_offsets_move_the_instant)
{
	static const struct {
		const char *exp;
		time_t want;
	} cases[] = {
		{ "2030-01-02T01:34:05Z", 1893548045 },
		{ "2030-01-02T03:04:05+01:30", 1893548045 },
		{ "2030-01-01T23:04:05-0230", 1893548045 },
		{ "2030-01-02T01:34:05.5Z", 1893548045 },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct rc_creds c;
		char doc[256], err[256] = "";

		snprintf(doc, sizeof(doc), "{\"AccessKeyId\":\"AK\","
			 "\"SecretAccessKey\":\"S\",\"Expiration\":\"%s\"}",
			 cases[i].exp);
		cr_assert_eq(parse_doc(doc, &c, err, sizeof(err)), 0, "%zu: %s",
			     i, err);
		cr_assert_eq(c.expires, cases[i].want, "%zu: %s", i,
			     cases[i].exp);
	}
}

/* Each is refused with its documented errno, and out is left all zero. */
Test(document, refusals_have_their_errno_and_clear_out)
{
	static const struct {
		const char *doc;
		int rc;
		const char *says;
	} cases[] = {
		{ "[\"AccessKeyId\",\"AK\"]", -EINVAL, "malformed" },
		{ "{\"AccessKeyId\":\"AK\",\"SecretAccessKey\":\"S\"} x",
		  -EINVAL, "malformed" },
		{ "{\"AccessKeyId\":\"A\\u0000K\",\"SecretAccessKey\":\"S\"}",
		  -EINVAL, "malformed" },
		{ "{\"AccessKeyId\":\"\\ud800\",\"SecretAccessKey\":\"S\"}",
		  -EINVAL, "malformed" },
		{ "{\"AccessKeyId\":7,\"SecretAccessKey\":\"S\"}", -EINVAL,
		  "lacks AccessKeyId" },
		{ "{\"Code\":\"Denied\",\"AccessKeyId\":\"AK\","
		  "\"SecretAccessKey\":\"S\"}", -EACCES, "Denied" },
		{ "{\"AccessKeyId\":\"AK\",\"SecretAccessKey\":\"S\","
		  "\"Expiration\":\"2030-13-01T00:00:00Z\"}", -EINVAL,
		  "bad Expiration" },
		/* strptime alone would take these: one-digit fields, a
		 * leading blank, an offset without its minutes' digits. */
		{ "{\"AccessKeyId\":\"AK\",\"SecretAccessKey\":\"S\","
		  "\"Expiration\":\"2030-1-02T03:04:05Z\"}", -EINVAL,
		  "bad Expiration" },
		{ "{\"AccessKeyId\":\"AK\",\"SecretAccessKey\":\"S\","
		  "\"Expiration\":\" 2030-01-02T03:04:05Z\"}", -EINVAL,
		  "bad Expiration" },
		{ "{\"AccessKeyId\":\"AK\",\"SecretAccessKey\":\"S\","
		  "\"Expiration\":\"2030-01-02T03:04:05+01:3\"}", -EINVAL,
		  "bad Expiration" },
		{ "{\"AccessKeyId\":\"AK\",\"SecretAccessKey\":\"S\","
		  "\"Expiration\":\"2030-01-02T03:04:05Z x\"}", -EINVAL,
		  "bad Expiration" },
	};
	static const struct rc_creds zero;

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct rc_creds c;
		char err[256] = "";

		memset(&c, 0xa5, sizeof(c));
		cr_assert_eq(parse_doc(cases[i].doc, &c, err, sizeof(err)),
			     cases[i].rc, "%zu: %s", i, err);
		cr_assert(strstr(err, cases[i].says), "%zu: %s", i, err);
		cr_assert(!memcmp(&c, &zero, sizeof(c)), "%zu", i);
	}
}

Test(document, a_field_longer_than_its_buffer_is_e2big)
{
	static const char head[] =
		"{\"SecretAccessKey\":\"S\",\"AccessKeyId\":\"";
	struct rc_creds c;
	size_t cap = sizeof(c.access_key);
	char *doc = calloc(1, sizeof(head) + cap + 2), err[256] = "";

	cr_assert_not_null(doc);
	memcpy(doc, head, sizeof(head) - 1);
	memset(doc + sizeof(head) - 1, 'K', cap); /* no room for the NUL */
	strcat(doc, "\"}");
	cr_assert_eq(parse_doc(doc, &c, err, sizeof(err)), -E2BIG, "%s", err);
	cr_assert(strstr(err, "too long"), "%s", err);
	/* One byte shorter fits. */
	memmove(doc + sizeof(head) - 1, doc + sizeof(head),
		strlen(doc + sizeof(head)) + 1);
	cr_assert_eq(parse_doc(doc, &c, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(strlen(c.access_key), cap - 1);
	free(doc);
}

/* ---- the shared credentials file's syntax (inifile.h) ---- */

static void creds_file(const char *text, char *path, size_t cap)
{
	clean_env();
	snprintf(path, cap, "%s/creds", tmpdir);
	write_file(path, text);
	setenv("AWS_SHARED_CREDENTIALS_FILE", path, 1);
}

Test(file, comments_blanks_and_indented_lines)
{
	struct creds_config cfg = { .source = CREDS_FILE };
	struct creds_provider *p;
	char path[128], err[256] = "";

	creds_file("\xEF\xBB\xBF; comment\r\n[ other ]\naws_access_key_id = NO\n"
		   "[default] # ours\r\n"
		   "  aws_access_key_id = AK ; inline comment\r\n"
		   "\taws_secret_access_key: se;cret#1 # comment\n"
		   "[other]\naws_session_token = NOT-OURS\n",
		   path, sizeof(path));
	p = creds_provider_new(&cfg, err, sizeof(err));
	cr_assert_not_null(p, "%s", err);
	/* An indented line is a key of its own, never a continuation; ';' or
	 * '#' without a blank before it belongs to the value. */
	expect_key(p, "AK", "se;cret#1", "");
	creds_provider_free(p);
}

Test(file, a_bad_line_is_named_and_not_echoed)
{
	static const struct {
		const char *text;
		const char *says;
	} cases[] = {
		{ "[default]\naws_access_key_id = K\nhushhush\n",
		  ": line 3: syntax error" },
		{ "[default]\naws_access_key_id = K\n[default hushhush\n",
		  ": line 3: section header is missing its closing ']'" },
		{ "[default] hushhush\naws_access_key_id = K\n",
		  ": line 1: unexpected text after ']'" },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct creds_config cfg = { .source = CREDS_FILE };
		char path[128], err[256] = "", want[256];

		creds_file(cases[i].text, path, sizeof(path));
		cr_assert_null(creds_provider_new(&cfg, err, sizeof(err)));
		snprintf(want, sizeof(want), "%s%s", path, cases[i].says);
		cr_assert(strstr(err, want), "%zu: %s", i, err);
		cr_assert_null(strstr(err, "hushhush"), "%zu: %s", i, err);
	}
}

Test(file, an_over_long_line_is_refused_not_split)
{
	struct creds_config cfg = { .source = CREDS_FILE };
	static const char head[] = "[default]\naws_access_key_id = K\n"
		"aws_secret_access_key = S\naws_session_token = ";
	size_t n = 70000;
	char *text = calloc(1, sizeof(head) + n + 2), path[128], err[256] = "";

	cr_assert_not_null(text);
	memcpy(text, head, sizeof(head) - 1);
	memset(text + sizeof(head) - 1, 'T', n);
	strcat(text, "\n");
	creds_file(text, path, sizeof(path));
	cr_assert_null(creds_provider_new(&cfg, err, sizeof(err)));
	cr_assert(strstr(err, "line 4: line is longer than"), "%s", err);
	free(text);
}
