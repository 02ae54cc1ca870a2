/* creds.c - the AWS credential chain and the provider that caches its
 * result. Owns: reading each source (config, environment, shared
 * credentials file, container endpoint, IMDSv2), picking the two HTTP
 * sources' documents apart (JSON by jansson), and refreshing expiring
 * credentials: the HTTP sources on a helper thread (workers.h), so a
 * reactor that signs a request never waits for IMDS or a container
 * endpoint; it signs with the old credentials until the new ones are
 * in. Error strings name sources, files, profiles and URLs, never
 * a key, secret or token; buffers that held secrets are wiped. */
#include "creds.h"

#include <ctype.h>
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <curl/curl.h>
#include <jansson.h>

#include "inifile.h"
#include "log.h"
#include "workers.h"

#define REFRESH_WINDOW_S 300     /* refresh this long before expiry */
#define REFRESH_RETRY_S 10       /* after a failed refresh, wait this long */
#define DEFAULT_TIMEOUT_MS 1000  /* fast fall-through off EC2 */
#define HTTP_BODY_MAX 16384      /* credential documents are ~1-5 KiB */
#define IMDS_DEFAULT "http://169.254.169.254"
#define CONTAINER_HOST "http://169.254.170.2"
#define IMDS_TOKEN_TTL_HEADER "X-aws-ec2-metadata-token-ttl-seconds: 21600"
#define IMDS_ROLE_PATH "/latest/meta-data/iam/security-credentials/"

/* A source that is not set up at all: the chain moves on to the next. */
#define SOURCE_ABSENT 1

struct creds_provider {
	pthread_mutex_t lock;       /* creds_get may run on several shards */
	enum creds_source mode;     /* what the config asked for */
	enum creds_source used;     /* which source supplied cur */
	char *access_key, *secret_key, *session_token; /* owned copies */
	char *profile, *credentials_file, *imds_endpoint;
	long timeout_ms;
	struct rc_creds cur;
	time_t next_try;            /* no refresh attempt before this */
	struct workers *refresher;  /* HTTP sources: fetches off the caller */
	struct refresh_job *job;    /* owned; in flight while refreshing */
	bool refreshing;
	pthread_cond_t refreshed;   /* job->finished became true */
};

/* One background refresh: filled on the helper thread, applied under the
 * provider's lock by whoever calls creds_get next (workers_reap). */
struct refresh_job {
	struct creds_provider *p;
	struct rc_creds fresh;
	int rc;
	bool finished;
	char why[512];
};

static const char *const source_names[] = {
	[CREDS_AUTO] = "auto",       [CREDS_CONFIG] = "config",
	[CREDS_ENV] = "env",         [CREDS_FILE] = "file",
	[CREDS_CONTAINER] = "container", [CREDS_IMDS] = "imds",
	[CREDS_ANONYMOUS] = "anonymous",
};

__attribute__((format(printf, 4, 5)))
static int fail(char *err, size_t errlen, int code, const char *fmt, ...)
{
	va_list ap;

	if (err && errlen) {
		va_start(ap, fmt);
		vsnprintf(err, errlen, fmt, ap);
		va_end(ap);
	}
	return code;
}

static int nonempty(const char *s)
{
	return s && *s;
}

static const char *env_nonempty(const char *name)
{
	const char *v = getenv(name);

	return nonempty(v) ? v : NULL;
}

static void free_secret(char *s)
{
	if (s) {
		explicit_bzero(s, strlen(s));
		free(s);
	}
}

/* Copies a credential field, refusing (not truncating) one too long. */
static int set_field(char *dst, size_t cap, const char *src,
		     const char *what, char *err, size_t errlen)
{
	size_t len = src ? strlen(src) : 0;

	if (len >= cap)
		return fail(err, errlen, -E2BIG, "%s is too long (%zu bytes)",
			    what, len);
	memcpy(dst, src ? src : "", len + 1);
	return 0;
}

static int fill_creds(struct rc_creds *out, const char *ak, const char *sk,
		      const char *token, const char *where, char *err,
		      size_t errlen)
{
	char what[160];
	int rc;

	memset(out, 0, sizeof(*out));
	snprintf(what, sizeof(what), "access key id from %s", where);
	rc = set_field(out->access_key, sizeof(out->access_key), ak, what,
		       err, errlen);
	snprintf(what, sizeof(what), "secret access key from %s", where);
	if (!rc)
		rc = set_field(out->secret_key, sizeof(out->secret_key), sk,
			       what, err, errlen);
	snprintf(what, sizeof(what), "session token from %s", where);
	if (!rc)
		rc = set_field(out->session_token, sizeof(out->session_token),
			       token, what, err, errlen);
	if (rc)
		explicit_bzero(out, sizeof(*out));
	return rc;
}

/* ---- config and environment ---- */

static int from_config(const struct creds_provider *p, struct rc_creds *out,
		       char *err, size_t errlen)
{
	int have_ak = nonempty(p->access_key);
	int have_sk = nonempty(p->secret_key);

	if (!have_ak && !have_sk)
		return fail(err, errlen, SOURCE_ABSENT,
			    "the config sets no access_key/secret_key");
	if (!have_ak || !have_sk)
		return fail(err, errlen, -EINVAL,
			    "the config sets %s but not %s",
			    have_ak ? "access_key" : "secret_key",
			    have_ak ? "secret_key" : "access_key");
	return fill_creds(out, p->access_key, p->secret_key, p->session_token,
			  "the config", err, errlen);
}

static int from_env(struct rc_creds *out, char *err, size_t errlen)
{
	const char *ak = env_nonempty("AWS_ACCESS_KEY_ID");
	const char *sk = env_nonempty("AWS_SECRET_ACCESS_KEY");

	if (!ak && !sk)
		return fail(err, errlen, SOURCE_ABSENT,
			    "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY are "
			    "not set");
	if (!ak || !sk)
		return fail(err, errlen, -EINVAL, "%s is set but %s is not",
			    ak ? "AWS_ACCESS_KEY_ID" : "AWS_SECRET_ACCESS_KEY",
			    ak ? "AWS_SECRET_ACCESS_KEY" : "AWS_ACCESS_KEY_ID");
	return fill_creds(out, ak, sk, env_nonempty("AWS_SESSION_TOKEN"),
			  "the environment", err, errlen);
}

/* ---- shared credentials file ---- */

/* Session tokens are ~1 KiB; anything near this is not a credentials file. */
#define CREDS_FILE_MAX_LINE 65536

struct ini_ctx {
	const char *profile;
	bool in_profile;     /* the last header named the profile */
	bool found;          /* the profile's section was seen */
	bool too_long;       /* a field did not fit */
	int bad_line;        /* the first line the reader refused, or 0 */
	char bad_what[96];
	char access_key[sizeof(((struct rc_creds *)0)->access_key)];
	char secret_key[sizeof(((struct rc_creds *)0)->secret_key)];
	char token[sizeof(((struct rc_creds *)0)->session_token)];
};

static char *trim(char *s)
{
	char *end;

	while (isspace((unsigned char)*s))
		s++;
	end = s + strlen(s);
	while (end > s && isspace((unsigned char)end[-1]))
		*--end = '\0';
	return s;
}

static void profile_copy(struct ini_ctx *c, char *dst, size_t cap,
			 const char *value)
{
	if (strlen(value) >= cap) {
		c->too_long = true;
		return;
	}
	strcpy(dst, value);
}

static void on_profile_section(void *user, int line, const char *name)
{
	struct ini_ctx *c = user;

	(void)line;
	c->in_profile = !strcmp(name, c->profile);
	c->found |= c->in_profile;
}

static void on_profile_key(void *user, int line, const char *name,
			   const char *value)
{
	struct ini_ctx *c = user;

	(void)line;
	if (!c->in_profile)
		return;
	if (!strcmp(name, "aws_access_key_id"))
		profile_copy(c, c->access_key, sizeof(c->access_key), value);
	else if (!strcmp(name, "aws_secret_access_key"))
		profile_copy(c, c->secret_key, sizeof(c->secret_key), value);
	else if (!strcmp(name, "aws_session_token"))
		profile_copy(c, c->token, sizeof(c->token), value);
	/* Other keys (region, role_arn, ...) are not ours: never an error. */
}

static void on_profile_error(void *user, int line, enum ini_fault fault,
			     const char *header, const char *what)
{
	struct ini_ctx *c = user;

	(void)header;
	if (fault == INI_FAULT_HEADER)
		c->in_profile = false;
	if (!c->bad_line) {
		c->bad_line = line;
		snprintf(c->bad_what, sizeof(c->bad_what), "%s", what);
	}
}

static const struct ini_reader profile_reader = {
	.max_line = CREDS_FILE_MAX_LINE,
	.section = on_profile_section,
	.key = on_profile_key,
	.error = on_profile_error,
};

/* Fills path with the credentials file's name; returns whether the user
 * named it (then a missing file is an error, not an absent source). */
static int credentials_path(const struct creds_provider *p, char *path,
			    size_t cap)
{
	const char *home;

	if (p->credentials_file) {
		snprintf(path, cap, "%s", p->credentials_file);
		return 1;
	}
	if (env_nonempty("AWS_SHARED_CREDENTIALS_FILE")) {
		snprintf(path, cap, "%s", getenv("AWS_SHARED_CREDENTIALS_FILE"));
		return 1;
	}
	home = env_nonempty("HOME");
	snprintf(path, cap, "%s/.aws/credentials", home ? home : "");
	return 0;
}

static int parse_profile(struct ini_ctx *c, FILE *f, const char *path,
			 char *err, size_t errlen)
{
	int rc = ini_read(f, &profile_reader, c);

	if (rc < 0)
		return fail(err, errlen, rc, "%s: cannot read: %s", path,
			    strerror(-rc));
	if (c->bad_line)
		return fail(err, errlen, -EINVAL, "%s: line %d: %s", path,
			    c->bad_line, c->bad_what);
	if (c->too_long)
		return fail(err, errlen, -E2BIG,
			    "%s: profile '%s' has a value too long", path,
			    c->profile);
	return 0;
}

static int from_file(const struct creds_provider *p, int required,
		     struct rc_creds *out, char *err, size_t errlen)
{
	struct ini_ctx *c;
	FILE *f;
	char path[4096];
	int named_file = credentials_path(p, path, sizeof(path));
	const char *profile = p->profile ? p->profile
			      : env_nonempty("AWS_PROFILE");
	int named_profile = profile != NULL;
	int rc;

	if (!profile)
		profile = "default";
	f = fopen(path, "re");
	if (!f) {
		int e = errno;

		rc = e == ENOENT && !named_file && !named_profile && !required
			     ? SOURCE_ABSENT : -e;
		return fail(err, errlen, rc, "credentials file %s: %s", path,
			    strerror(e));
	}
	struct stat st;
	if (fstat(fileno(f), &st) == 0 && !S_ISREG(st.st_mode)) {
		fclose(f); /* a directory reads as EISDIR, or EIO through stdio */
		return fail(err, errlen, S_ISDIR(st.st_mode) ? -EISDIR : -EINVAL,
			    "credentials file %s: not a "
			    "regular file%s", path, S_ISDIR(st.st_mode) ?
			    " (a directory)" : "");
	}
	c = calloc(1, sizeof(*c));
	if (!c) {
		fclose(f);
		return fail(err, errlen, -ENOMEM, "out of memory");
	}
	c->profile = profile;
	rc = parse_profile(c, f, path, err, errlen);
	fclose(f);
	if (!rc && !c->found)
		rc = fail(err, errlen,
			  named_profile || required ? -ENOENT : SOURCE_ABSENT,
			  "profile '%s' not found in %s", profile, path);
	if (!rc && (!*c->access_key || !*c->secret_key))
		rc = fail(err, errlen, -EINVAL,
			  "profile '%s' in %s lacks aws_access_key_id or "
			  "aws_secret_access_key", profile, path);
	if (!rc) {
		char where[4200];

		snprintf(where, sizeof(where), "profile '%s' in %s", profile,
			 path);
		rc = fill_creds(out, c->access_key, c->secret_key, c->token,
				where, err, errlen);
	}
	explicit_bzero(c, sizeof(*c));
	free(c);
	return rc;
}

/* ---- the two HTTP sources' credential document (jansson) ---- */

/* jansson's allocations hold the decoded secrets: a size header lets the
 * free hook wipe them before they go back to the heap. creds.c is the
 * only user of jansson in the process, so the hooks are set once here. */
struct secret_block {
	size_t size;
	max_align_t data[];
};

static void *secret_malloc(size_t size)
{
	struct secret_block *b;

	if (size > SIZE_MAX - sizeof(*b))
		return NULL;
	b = malloc(sizeof(*b) + size);
	if (!b)
		return NULL;
	b->size = size;
	return b->data;
}

static void secret_free(void *ptr)
{
	struct secret_block *b;

	if (!ptr)
		return;
	b = (struct secret_block *)((char *)ptr - offsetof(struct secret_block,
							   data));
	explicit_bzero(b, sizeof(*b) + b->size);
	free(b);
}

static void set_json_allocator(void)
{
	json_set_alloc_funcs(secret_malloc, secret_free);
}

/* Copies member key of obj into dst when it is a string. Returns 1 if
 * it was, 0 if absent or not a string (as if absent), -E2BIG if it does
 * not fit. jansson refuses \u0000, so the length is strlen's. */
static int json_member(const json_t *obj, const char *key, char *dst,
		       size_t cap)
{
	const json_t *v = json_object_get(obj, key);

	if (!json_is_string(v))
		return 0;
	if (json_string_length(v) >= cap)
		return -E2BIG;
	memcpy(dst, json_string_value(v), json_string_length(v) + 1);
	return 1;
}

/* Whether s starts with shape: 'd' a digit, any other byte itself.
 * strptime alone would take blanks and one-digit fields. */
static bool has_shape(const char *s, const char *shape)
{
	for (; *shape; s++, shape++) {
		if (*shape == 'd' ? !isdigit((unsigned char)*s) : *s != *shape)
			return false;
	}
	return true;
}

/* "2024-01-02T03:04:05Z", optional fraction, 'Z' or +hh:mm / -hhmm:
 * strptime reads and range-checks the fields and the offset (%z), timegm
 * takes them as UTC; strptime has no directive for the fraction. */
static int parse_iso8601(const char *s, time_t *out)
{
	struct tm tm = { 0 }, zone = { 0 };
	const char *p;

	if (!has_shape(s, "dddd-dd-ddTdd:dd:dd") ||
	    !(p = strptime(s, "%Y-%m-%dT%H:%M:%S", &tm)))
		return -EINVAL;
	if (*p == '.') {
		if (!isdigit((unsigned char)*++p))
			return -EINVAL;
		while (isdigit((unsigned char)*p))
			p++;
	}
	if ((*p != 'Z' && *p != '+' && *p != '-') ||
	    !(p = strptime(p, "%z", &zone)) || *p)
		return -EINVAL;
	*out = timegm(&tm) - zone.tm_gmtoff;
	return 0;
}

/* The wanted members of a parsed document; has_* is 1 when present. */
struct creds_doc {
	char code[64], expiration[64];
	int has_ak, has_sk, has_code, has_expiration;
};

static int doc_members(const json_t *root, struct rc_creds *out,
		       struct creds_doc *d)
{
	int token;

	d->has_ak = json_member(root, "AccessKeyId", out->access_key,
				sizeof(out->access_key));
	d->has_sk = json_member(root, "SecretAccessKey", out->secret_key,
				sizeof(out->secret_key));
	token = json_member(root, "Token", out->session_token,
			    sizeof(out->session_token));
	d->has_expiration = json_member(root, "Expiration", d->expiration,
					sizeof(d->expiration));
	d->has_code = json_member(root, "Code", d->code, sizeof(d->code));
	if (d->has_ak < 0 || d->has_sk < 0 || token < 0 ||
	    d->has_expiration < 0 || d->has_code < 0)
		return -E2BIG;
	return 0;
}

/* The document both HTTP sources return: one JSON object, nothing after
 * it; members other than the five wanted ones are ignored. */
static int creds_from_json(const char *doc, size_t len, const char *where,
			   struct rc_creds *out, char *err, size_t errlen)
{
	static pthread_once_t allocator_once = PTHREAD_ONCE_INIT;
	struct creds_doc d = { 0 };
	json_error_t jerr;
	json_t *root;
	int rc;

	pthread_once(&allocator_once, set_json_allocator);
	memset(out, 0, sizeof(*out));
	root = json_loadb(doc, len, 0, &jerr);
	if (!json_is_object(root))
		rc = fail(err, errlen, -EINVAL, "%s: malformed JSON response",
			  where);
	else if (doc_members(root, out, &d))
		rc = fail(err, errlen, -E2BIG,
			  "%s: a credential field is too long", where);
	else if (d.has_code && strcmp(d.code, "Success"))
		rc = fail(err, errlen, -EACCES, "%s: Code is \"%.32s\"", where,
			  d.code);
	else if (!d.has_ak || !d.has_sk || !*out->access_key ||
		 !*out->secret_key)
		rc = fail(err, errlen, -EINVAL,
			  "%s: response lacks AccessKeyId or SecretAccessKey",
			  where);
	else if (d.has_expiration &&
		 parse_iso8601(d.expiration, &out->expires))
		rc = fail(err, errlen, -EINVAL, "%s: bad Expiration \"%.40s\"",
			  where, d.expiration);
	else
		rc = 0;
	json_decref(root);
	if (rc)
		explicit_bzero(out, sizeof(*out));
	return rc;
}

/* ---- blocking HTTP for the container and IMDS sources ---- */

struct http_body {
	char *data;
	size_t len, cap;
	int overflow;
};

static size_t http_collect(char *ptr, size_t size, size_t nmemb, void *ud)
{
	struct http_body *b = ud;
	size_t n = size * nmemb;

	if (n >= b->cap - b->len) {
		b->overflow = 1;
		return 0; /* makes curl fail the transfer */
	}
	memcpy(b->data + b->len, ptr, n);
	b->len += n;
	b->data[b->len] = '\0';
	return n;
}

static int set_curl_options(CURL *h, const char *method, const char *url,
			    struct curl_slist *headers, long timeout_ms,
			    struct http_body *body)
{
	CURLcode c = CURLE_OK;

#define SETOPT(opt, val) \
	do { if (c == CURLE_OK) c = curl_easy_setopt(h, opt, val); } while (0)
	SETOPT(CURLOPT_URL, url);
	SETOPT(CURLOPT_HTTPHEADER, headers);
	SETOPT(CURLOPT_TIMEOUT_MS, timeout_ms);
	SETOPT(CURLOPT_CONNECTTIMEOUT_MS, timeout_ms);
	SETOPT(CURLOPT_NOSIGNAL, 1L);
	/* Metadata endpoints are link-local: a proxy would be wrong. */
	SETOPT(CURLOPT_PROXY, "");
	SETOPT(CURLOPT_FOLLOWLOCATION, 0L);
#if LIBCURL_VERSION_NUM >= 0x075500
	SETOPT(CURLOPT_PROTOCOLS_STR, "http,https");
#else
	SETOPT(CURLOPT_PROTOCOLS, (long)(CURLPROTO_HTTP | CURLPROTO_HTTPS));
#endif
	SETOPT(CURLOPT_WRITEFUNCTION, http_collect);
	SETOPT(CURLOPT_WRITEDATA, body);
	if (!strcmp(method, "PUT")) {
		SETOPT(CURLOPT_CUSTOMREQUEST, "PUT");
		SETOPT(CURLOPT_POSTFIELDS, "");
		SETOPT(CURLOPT_POSTFIELDSIZE, 0L);
	}
#undef SETOPT
	return c == CURLE_OK ? 0 : -EINVAL;
}

/* One request; 0 only for HTTP 200, with the body NUL-terminated. */
static int http_fetch(const char *method, const char *url,
		      struct curl_slist *headers, long timeout_ms,
		      struct http_body *body, const char *what, char *err,
		      size_t errlen)
{
	CURL *h = curl_easy_init();
	CURLcode c;
	long status = 0;
	int rc = 0;

	body->len = 0;
	body->overflow = 0;
	body->data[0] = '\0';
	if (!h)
		return fail(err, errlen, -ENOMEM, "%s: curl_easy_init failed",
			    what);
	if (set_curl_options(h, method, url, headers, timeout_ms, body)) {
		rc = fail(err, errlen, -EINVAL, "%s: cannot set up %s", what,
			  url);
		goto out;
	}
	c = curl_easy_perform(h);
	if (body->overflow)
		rc = fail(err, errlen, -E2BIG, "%s: response from %s over %zu "
			  "bytes", what, url, body->cap - 1);
	else if (c != CURLE_OK)
		rc = fail(err, errlen, c == CURLE_OPERATION_TIMEDOUT ?
			  -ETIMEDOUT : -EHOSTUNREACH, "%s: %s %s: %s", what,
			  method, url, curl_easy_strerror(c));
	else if (curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status) !=
		 CURLE_OK || status != 200)
		rc = fail(err, errlen, status == 401 || status == 403 ?
			  -EACCES : status == 404 ? -ENOENT : -EIO,
			  "%s: %s %s: HTTP %ld", what, method, url, status);
out:
	curl_easy_cleanup(h);
	return rc;
}

static int append_header(struct curl_slist **list, const char *name,
			 const char *value)
{
	char line[4200];
	struct curl_slist *n;

	if (strpbrk(value, "\r\n") ||
	    snprintf(line, sizeof(line), "%s: %s", name, value) >=
		    (int)sizeof(line))
		return -EINVAL;
	n = curl_slist_append(*list, line);
	explicit_bzero(line, sizeof(line));
	if (!n)
		return -ENOMEM;
	*list = n;
	return 0;
}

/* ---- container endpoint (ECS, SageMaker, EKS pod identity) ---- */

static int read_token_file(const char *path, char *tok, size_t cap,
			   char *err, size_t errlen)
{
	FILE *f = fopen(path, "r");
	char *start;
	size_t n;

	if (!f) {
		int e = errno;

		return fail(err, errlen, -e, "container token file %s: %s",
			    path, strerror(e));
	}
	n = fread(tok, 1, cap - 1, f);
	if (ferror(f) || !feof(f) || n == 0) {
		fclose(f);
		explicit_bzero(tok, cap);
		return fail(err, errlen, -EINVAL, "container token file %s: "
			    "empty, unreadable or too large", path);
	}
	fclose(f);
	tok[n] = '\0';
	start = trim(tok);
	memmove(tok, start, strlen(start) + 1);
	return 0;
}

static int container_auth_header(struct curl_slist **headers, char *err,
				 size_t errlen)
{
	const char *file = env_nonempty("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE");
	const char *value = env_nonempty("AWS_CONTAINER_AUTHORIZATION_TOKEN");
	char tok[4096];
	int rc;

	if (file) {
		rc = read_token_file(file, tok, sizeof(tok), err, errlen);
		if (rc)
			return rc;
		value = tok;
	}
	if (!value)
		return 0;
	rc = append_header(headers, "Authorization", value);
	explicit_bzero(tok, sizeof(tok));
	if (rc)
		return fail(err, errlen, rc, "container authorization token "
			    "is malformed");
	return 0;
}

static int from_container(const struct creds_provider *p,
			  struct rc_creds *out, char *err, size_t errlen)
{
	const char *full = env_nonempty("AWS_CONTAINER_CREDENTIALS_FULL_URI");
	const char *rel =
		env_nonempty("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI");
	struct curl_slist *headers = NULL;
	char url[2048], data[HTTP_BODY_MAX];
	struct http_body body = { data, 0, sizeof(data), 0 };
	int rc;

	if (!full && !rel)
		return fail(err, errlen, SOURCE_ABSENT,
			    "AWS_CONTAINER_CREDENTIALS_FULL_URI and "
			    "_RELATIVE_URI are not set");
	if (full)
		rc = snprintf(url, sizeof(url), "%s", full);
	else if (*rel != '/')
		return fail(err, errlen, -EINVAL, "AWS_CONTAINER_CREDENTIALS_"
			    "RELATIVE_URI must start with '/'");
	else
		rc = snprintf(url, sizeof(url), CONTAINER_HOST "%s", rel);
	if (rc < 0 || (size_t)rc >= sizeof(url))
		return fail(err, errlen, -E2BIG, "container credentials URI "
			    "is too long");
	rc = container_auth_header(&headers, err, errlen);
	if (!rc)
		rc = http_fetch("GET", url, headers, p->timeout_ms, &body,
				"container credentials", err, errlen);
	if (!rc)
		rc = creds_from_json(body.data, body.len,
				     "container credentials", out, err,
				     errlen);
	curl_slist_free_all(headers);
	explicit_bzero(data, sizeof(data));
	return rc;
}

/* ---- EC2 instance metadata, IMDSv2 ---- */

static int valid_role_name(const char *s)
{
	size_t n = strlen(s);

	if (n == 0 || n > 128)
		return 0;
	for (; *s; s++)
		if (!isalnum((unsigned char)*s) && !strchr("+=,.@_-", *s))
			return 0;
	return 1;
}

static int imds_role(const char *base, struct curl_slist *headers,
		     long timeout_ms, struct http_body *body, char *role,
		     size_t cap, char *err, size_t errlen)
{
	char url[2048];
	char *nl;
	int rc;

	snprintf(url, sizeof(url), "%s" IMDS_ROLE_PATH, base);
	rc = http_fetch("GET", url, headers, timeout_ms, body, "IMDS", err,
			errlen);
	if (rc == -ENOENT)
		return fail(err, errlen, rc, "IMDS: no IAM role is attached "
			    "to this instance");
	if (rc)
		return rc;
	nl = strchr(body->data, '\n');
	if (nl)
		*nl = '\0';
	snprintf(role, cap, "%s", trim(body->data));
	if (!valid_role_name(role))
		return fail(err, errlen, -EINVAL, "IMDS: bad role name in "
			    "%s", url);
	return 0;
}

static int imds_session(const char *base, long timeout_ms,
			struct http_body *body, struct curl_slist **headers,
			char *err, size_t errlen)
{
	struct curl_slist *ttl = NULL;
	char url[2048];
	int rc;

	snprintf(url, sizeof(url), "%s/latest/api/token", base);
	ttl = curl_slist_append(NULL, IMDS_TOKEN_TTL_HEADER);
	if (!ttl)
		return fail(err, errlen, -ENOMEM, "out of memory");
	rc = http_fetch("PUT", url, ttl, timeout_ms, body, "IMDS", err,
			errlen);
	curl_slist_free_all(ttl);
	if (rc)
		return rc;
	rc = append_header(headers, "X-aws-ec2-metadata-token",
			   trim(body->data));
	if (rc)
		return fail(err, errlen, rc, "IMDS: bad session token");
	return 0;
}

static int from_imds(const struct creds_provider *p, struct rc_creds *out,
		     char *err, size_t errlen)
{
	const char *disabled = getenv("AWS_EC2_METADATA_DISABLED");
	struct curl_slist *headers = NULL;
	char base[1024], url[2048], role[160], data[HTTP_BODY_MAX];
	struct http_body body = { data, 0, sizeof(data), 0 };
	size_t n;
	int rc;

	if (disabled && !strcasecmp(disabled, "true"))
		return fail(err, errlen, SOURCE_ABSENT,
			    "IMDS is disabled by AWS_EC2_METADATA_DISABLED");
	n = (size_t)snprintf(base, sizeof(base), "%s",
			     p->imds_endpoint ? p->imds_endpoint : IMDS_DEFAULT);
	if (n >= sizeof(base))
		return fail(err, errlen, -E2BIG, "IMDS endpoint is too long");
	while (n > 0 && base[n - 1] == '/')
		base[--n] = '\0';

	rc = imds_session(base, p->timeout_ms, &body, &headers, err, errlen);
	if (!rc)
		rc = imds_role(base, headers, p->timeout_ms, &body, role,
			       sizeof(role), err, errlen);
	if (!rc) {
		snprintf(url, sizeof(url), "%s" IMDS_ROLE_PATH "%s", base,
			 role);
		rc = http_fetch("GET", url, headers, p->timeout_ms, &body,
				"IMDS", err, errlen);
	}
	if (!rc)
		rc = creds_from_json(body.data, body.len, "IMDS", out, err,
				     errlen);
	curl_slist_free_all(headers);
	explicit_bzero(data, sizeof(data));
	return rc;
}

/* ---- the chain and the provider ---- */

static bool fetched_over_http(enum creds_source s)
{
	return s == CREDS_CONTAINER || s == CREDS_IMDS;
}

/* The sources read from memory or a local file, never the network: all
 * that refresh_locked, which runs on a signing (reactor) thread, may
 * reach. The HTTP ones refresh on the provider's own thread. */
static int from_local_source(const struct creds_provider *p,
			     enum creds_source s, int required,
			     struct rc_creds *out, char *err, size_t errlen)
{
	switch (s) {
	case CREDS_CONFIG:
		return from_config(p, out, err, errlen);
	case CREDS_ENV:
		return from_env(out, err, errlen);
	case CREDS_FILE:
		return from_file(p, required, out, err, errlen);
	case CREDS_ANONYMOUS:
		memset(out, 0, sizeof(*out));
		return 0;
	case CREDS_CONTAINER:
	case CREDS_IMDS:
	case CREDS_AUTO:
		break;
	}
	return fail(err, errlen, -EINVAL, "credentials source %d is not "
		    "local", s);
}

static int from_source(const struct creds_provider *p, enum creds_source s,
		       int required, struct rc_creds *out, char *err,
		       size_t errlen)
{
	switch (s) {
	case CREDS_CONTAINER:
		return from_container(p, out, err, errlen);
	case CREDS_IMDS:
		return from_imds(p, out, err, errlen);
	case CREDS_AUTO:
		return fail(err, errlen, -EINVAL, "unknown credentials "
			    "source %d", s);
	default:
		return from_local_source(p, s, required, out, err, errlen);
	}
}

/* One named source: "not set up" is an error here, not a skip. */
static int resolve_one(const struct creds_provider *p, enum creds_source s,
		       struct rc_creds *out, char *err, size_t errlen)
{
	int rc = from_source(p, s, 1, out, err, errlen);

	return rc == SOURCE_ABSENT ? -ENOENT : rc;
}

static int resolve_chain(const struct creds_provider *p,
			 enum creds_source *used, struct rc_creds *out,
			 char *err, size_t errlen)
{
	static const enum creds_source chain[] = {
		CREDS_CONFIG, CREDS_ENV, CREDS_FILE, CREDS_CONTAINER,
		CREDS_IMDS,
	};
	char why[512];
	size_t i;
	int rc = SOURCE_ABSENT;

	for (i = 0; i < sizeof(chain) / sizeof(chain[0]); i++) {
		rc = from_source(p, chain[i], 0, out, why, sizeof(why));
		if (rc == 0) {
			*used = chain[i];
			return 0;
		}
		if (rc < 0 && chain[i] != CREDS_IMDS)
			return fail(err, errlen, rc, "%s", why);
	}
	/* Reaching IMDS means nothing else was set up: say so. */
	return fail(err, errlen, rc < 0 ? rc : -ENOENT,
		    "no AWS credentials: none in the config, the environment, "
		    "the shared credentials file or a container endpoint; %s",
		    why);
}

static int resolve(const struct creds_provider *p, enum creds_source *used,
		   struct rc_creds *out, char *err, size_t errlen)
{
	if (p->mode == CREDS_AUTO)
		return resolve_chain(p, used, out, err, errlen);
	*used = p->mode;
	return resolve_one(p, p->mode, out, err, errlen);
}

static int dup_opt(char **dst, const char *src)
{
	*dst = NULL;
	if (!src)
		return 0;
	*dst = strdup(src);
	return *dst ? 0 : -ENOMEM;
}

void creds_provider_free(struct creds_provider *p)
{
	if (!p)
		return;
	workers_free(p->refresher); /* waits for a fetch in flight */
	if (p->job)
		explicit_bzero(p->job, sizeof(*p->job));
	free(p->job);
	pthread_cond_destroy(&p->refreshed);
	free_secret(p->access_key);
	free_secret(p->secret_key);
	free_secret(p->session_token);
	free(p->profile);
	free(p->credentials_file);
	free(p->imds_endpoint);
	pthread_mutex_destroy(&p->lock);
	explicit_bzero(p, sizeof(*p));
	free(p);
}

void creds_provider_replace(struct creds_provider *p,
			    struct creds_provider *fresh)
{
	_Static_assert(offsetof(struct creds_provider, lock) == 0,
		       "the lock leads the struct");
	struct creds_provider old;
	pthread_mutex_lock(&p->lock);
	pthread_mutex_lock(&fresh->lock);
	old = *p;
	/* Each keeps its own mutex: only what it guards moves. */
	memcpy((char *)p + sizeof(p->lock), (char *)fresh + sizeof(p->lock),
	       sizeof(*p) - sizeof(p->lock));
	memcpy((char *)fresh + sizeof(p->lock), (char *)&old + sizeof(p->lock),
	       sizeof(*p) - sizeof(p->lock));
	pthread_mutex_unlock(&fresh->lock);
	pthread_mutex_unlock(&p->lock);
	explicit_bzero(&old, sizeof(old));
	creds_provider_free(fresh);
}

struct creds_provider *creds_provider_new(const struct creds_config *cfg,
					  char *err, size_t errlen)
{
	struct creds_provider *p;
	int rc;

	if (err && errlen)
		err[0] = '\0';
	if (!cfg || cfg->source < CREDS_AUTO || cfg->source > CREDS_ANONYMOUS) {
		fail(err, errlen, -EINVAL, "bad credentials configuration");
		return NULL;
	}
	p = calloc(1, sizeof(*p));
	if (!p || pthread_mutex_init(&p->lock, NULL)) {
		free(p);
		fail(err, errlen, -ENOMEM, "out of memory");
		return NULL;
	}
	if (pthread_cond_init(&p->refreshed, NULL)) {
		pthread_mutex_destroy(&p->lock);
		free(p);
		fail(err, errlen, -ENOMEM, "out of memory");
		return NULL;
	}
	p->mode = cfg->source;
	p->timeout_ms = cfg->timeout_ms > 0 ? cfg->timeout_ms
					    : DEFAULT_TIMEOUT_MS;
	rc = dup_opt(&p->access_key, cfg->access_key);
	rc = rc ? rc : dup_opt(&p->secret_key, cfg->secret_key);
	rc = rc ? rc : dup_opt(&p->session_token, cfg->session_token);
	rc = rc ? rc : dup_opt(&p->profile, cfg->profile);
	rc = rc ? rc : dup_opt(&p->credentials_file, cfg->credentials_file);
	rc = rc ? rc : dup_opt(&p->imds_endpoint, cfg->imds_endpoint);
	if (rc)
		fail(err, errlen, rc, "out of memory");
	else
		rc = resolve(p, &p->used, &p->cur, err, errlen);
	if (!rc && fetched_over_http(p->used) && !(p->job =
	    calloc(1, sizeof(*p->job))))
		rc = fail(err, errlen, -ENOMEM, "out of memory");
	if (!rc && p->job && !(p->refresher = workers_new(1, "rc-creds")))
		rc = fail(err, errlen, -errno, "credentials refresh thread: %s",
			  strerror(errno));
	if (rc) {
		creds_provider_free(p);
		return NULL;
	}
	log_debug("credentials: using %s", source_names[p->used]);
	return p;
}

static int needs_refresh(const struct rc_creds *c, time_t now)
{
	return c->expires != 0 && c->expires - now <= REFRESH_WINDOW_S;
}

/* Called with the lock held. Keeps the old credentials when a refresh
 * fails but they are still valid; retries at most every REFRESH_RETRY_S. */
static int refresh_locked(struct creds_provider *p, time_t now)
{
	struct rc_creds *fresh;
	char why[512];
	int rc;

	if (now < p->next_try)
		return now < p->cur.expires ? 0 : -EKEYEXPIRED;
	fresh = malloc(sizeof(*fresh));
	if (!fresh)
		return now < p->cur.expires ? 0 : -ENOMEM;
	/* An HTTP source has its refresher (creds_provider_new fails
	 * without one): here only a local one, no network wait. */
	rc = from_local_source(p, p->used, 1, fresh, why, sizeof(why));
	if (rc == SOURCE_ABSENT)
		rc = -ENOENT;
	if (!rc) {
		p->cur = *fresh;
		p->next_try = 0;
	} else {
		p->next_try = now + REFRESH_RETRY_S;
		log_warn("credentials: refresh from %s failed: %s",
			 source_names[p->used], why);
	}
	explicit_bzero(fresh, sizeof(*fresh));
	free(fresh);
	if (rc && now < p->cur.expires)
		return 0;
	return rc;
}

/* On the helper thread: only p's configuration (never written after
 * creds_provider_new) is read here. */
static void refresh_run(void *arg)
{
	struct refresh_job *j = arg;
	struct creds_provider *p = j->p;
	int rc = resolve_one(p, p->used, &j->fresh, j->why, sizeof(j->why));

	pthread_mutex_lock(&p->lock);
	j->rc = rc;
	j->finished = true;
	pthread_cond_broadcast(&p->refreshed);
	pthread_mutex_unlock(&p->lock);
}

/* The pool's record of a finished job: the result is applied by
 * apply_refresh as soon as the job says finished, reaped or not. */
static void refresh_reaped(void *arg)
{
	(void)arg;
}

/* Under the lock: a finished refresh's result goes live. */
static void apply_refresh(struct creds_provider *p)
{
	struct refresh_job *j = p->job;

	if (!p->refreshing || !j->finished)
		return;
	if (!j->rc) {
		p->cur = j->fresh;
		p->next_try = 0;
	} else {
		p->next_try = time(NULL) + REFRESH_RETRY_S;
		log_warn("credentials: refresh from %s failed: %s",
			 source_names[p->used], j->why);
	}
	explicit_bzero(j, sizeof(*j));
	p->refreshing = false;
}

/* Under the lock: starts a background refresh unless one is running or
 * the last failed less than REFRESH_RETRY_S ago. The old credentials
 * serve until it is in; once they have expired, -EKEYEXPIRED. */
static int refresh_async_locked(struct creds_provider *p, time_t now)
{
	if (!p->refreshing && now >= p->next_try) {
		*p->job = (struct refresh_job){.p = p};
		if (workers_submit(p->refresher, refresh_run, refresh_reaped,
				   p->job) == 0)
			p->refreshing = true;
		else
			p->next_try = now + REFRESH_RETRY_S;
	}
	return now < p->cur.expires ? 0 : -EKEYEXPIRED;
}

int creds_get(struct creds_provider *p, struct rc_creds *out, int *anonymous)
{
	time_t now = time(NULL);
	int rc = 0;

	if (!p || !out)
		return -EINVAL;
	pthread_mutex_lock(&p->lock);
	if (p->refresher) {
		workers_reap(p->refresher);
		apply_refresh(p);
	}
	if (needs_refresh(&p->cur, now))
		rc = p->refresher ? refresh_async_locked(p, now)
				  : refresh_locked(p, now);
	if (!rc)
		*out = p->cur;
	if (anonymous)
		*anonymous = p->used == CREDS_ANONYMOUS;
	pthread_mutex_unlock(&p->lock);
	return rc;
}

void creds_wait_refresh(struct creds_provider *p)
{
	if (!p)
		return;
	pthread_mutex_lock(&p->lock);
	while (p->refreshing && !p->job->finished)
		pthread_cond_wait(&p->refreshed, &p->lock);
	if (p->refresher)
		apply_refresh(p);
	pthread_mutex_unlock(&p->lock);
}

const char *creds_source_name(const struct creds_provider *p)
{
	if (!p)
		return "none";
	return source_names[p->used];
}

int creds_parse_json(const char *doc, size_t len, struct rc_creds *out,
		     char *err, size_t errlen)
{
	return creds_from_json(doc, len, "credentials document", out, err,
			       errlen);
}
