/* config.c - owns the daemon's configuration file: reading it (inifile.h),
 * validating every key of [daemon], [s3] and [dataset NAME], the defaults,
 * and the dataset access rule (config_dataset_allows).
 *
 * Every error is one line, "PATH:LINE: [section] key: what is wrong (got
 * 'value')", and every error of the file is reported, in one run (up to
 * MAX_ERRORS): a config either loads whole or not at all. Secret values
 * are never echoed. Comments are whole lines starting with ';' or '#', or
 * the end of a line from a ';' or '#' that follows a blank. Lines longer
 * than CONFIG_MAX_LINE are refused, not split. */
#include "config.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <grp.h>
#include <limits.h>
#include <pwd.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "inifile.h"
#include "log.h"
#include "vec.h"

#define DEFAULT_SOCKET "/run/ringcache/ringcache.sock"
#define DEFAULT_REGION "us-east-1"
#define MAX_KEYS_PER_SECTION 64
#define DATASET_NAME_MAX 63
#define SUN_PATH_MAX (sizeof(((struct sockaddr_un *)0)->sun_path) - 1)
#define MAX_ERRORS 50
#define CONFIG_MAX_LINE 200 /* characters, blanks at either end aside */

enum section_kind { SEC_NONE, SEC_DAEMON, SEC_S3, SEC_DATASET, SEC_INVALID };

struct parser {
	struct rc_config *cfg;
	FILE *fp;
	int line;

	enum section_kind sec;
	char label[80]; /* "daemon", "s3", "dataset NAME": for messages */
	int seen_line[MAX_KEYS_PER_SECTION]; /* per key of the section */
	int daemon_line, s3_line;

	/* Lines of keys that are checked against each other at the end. */
	int memory_line, block_line, addressing_line, credentials_line;
	int tier_line;
	int access_key_line, secret_key_line, session_token_line;

	char *err;
	size_t errlen;
	size_t err_used;      /* bytes of err written */
	unsigned n_errors;
	bool failed;          /* any error: the file does not load */
	bool section_failed;  /* an error in the current section */
	bool daemon_failed;   /* an error in [daemon]: skip its cross-checks */
	bool s3_failed;       /* an error in [s3]: skip its cross-checks */
	bool *ds_failed;      /* by dataset index: skip its cross-checks */
	uint32_t ds_failed_cap;
};

/* ---- errors ------------------------------------------------------------ */

/* Appends one line to p->err; past MAX_ERRORS or the buffer, only counts
 * (config_load ends with how many were left out). */
static void vfail_at(struct parser *p, int line, const char *label,
		     const char *key, const char *fmt, va_list ap)
{
	p->failed = true;
	p->section_failed = true;
	if (p->sec == SEC_S3)
		p->s3_failed = true;
	if (p->sec == SEC_DAEMON)
		p->daemon_failed = true;
	if (p->sec == SEC_DATASET && p->ds_failed)
		p->ds_failed[p->cfg->n_datasets - 1] = true;
	p->n_errors++;
	char what[1000];
	vsnprintf(what, sizeof(what), fmt, ap);
	char where[100] = "";
	if (label[0] && key)
		snprintf(where, sizeof(where), "[%s] %s: ", label, key);
	else if (label[0])
		snprintf(where, sizeof(where), "[%s]: ", label);
	else if (key)
		snprintf(where, sizeof(where), "%s: ", key);
	char one[1400];
	int n = snprintf(one, sizeof(one), "%s%s:%d: %s%s",
			 p->err_used ? "\n" : "", p->cfg->path, line, where,
			 what);
	/* Room is kept for the "N more errors" line. */
	if (p->n_errors > MAX_ERRORS || n < 0 ||
	    p->err_used + (size_t)n + 40 >= p->errlen)
		return;
	memcpy(p->err + p->err_used, one, (size_t)n + 1);
	p->err_used += (size_t)n;
}

static unsigned errors_shown(const struct parser *p)
{
	unsigned n = 0;
	for (size_t i = 0; i < p->err_used; i++)
		n += p->err[i] == '\n';
	return p->err_used ? n + 1 : 0;
}

/* Returns 0 so that key handlers can `return fail(...)`. */
__attribute__((format(printf, 5, 6)))
static int fail_at(struct parser *p, int line, const char *label,
		   const char *key, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vfail_at(p, line, label, key, fmt, ap);
	va_end(ap);
	return 0;
}

__attribute__((format(printf, 3, 4)))
static int fail(struct parser *p, const char *key, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vfail_at(p, p->line, p->label, key, fmt, ap);
	va_end(ap);
	return 0;
}

bool config_key_is_secret(const char *key)
{
	return strcmp(key, "secret_key") == 0 ||
	       strcmp(key, "session_token") == 0;
}

/* "what (got 'value')", or "(value hidden)" for secrets. */
static int fail_value(struct parser *p, const char *key, const char *value,
		      const char *what)
{
	if (config_key_is_secret(key))
		return fail(p, key, "%s (value hidden)", what);
	return fail(p, key, "%s (got '%.120s')", what, value);
}

/* ---- value parsers ----------------------------------------------------- */

static bool all_digits(const char *s, int base)
{
	if (*s == '\0')
		return false;
	for (; *s; s++) {
		if (base == 8 ? (*s < '0' || *s > '7') : !isdigit((unsigned char)*s))
			return false;
	}
	return true;
}

static int parse_u64(const char *s, int base, uint64_t *out)
{
	if (!all_digits(s, base))
		return -1;
	errno = 0;
	char *end;
	unsigned long long v = strtoull(s, &end, base);
	if (errno != 0 || *end != '\0')
		return -1;
	*out = v;
	return 0;
}

int config_parse_size(const char *s, uint64_t *out)
{
	if (!s || !out || !isdigit((unsigned char)*s))
		return -1;
	errno = 0;
	char *end;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno != 0)
		return -1;
	unsigned shift = 0;
	if (*end != '\0') {
		switch (toupper((unsigned char)*end)) {
		case 'K': shift = 10; break;
		case 'M': shift = 20; break;
		case 'G': shift = 30; break;
		case 'T': shift = 40; break;
		default: return -1;
		}
		if (end[1] != '\0')
			return -1;
	}
	if (shift && v > (UINT64_MAX >> shift))
		return -1;
	*out = (uint64_t)v << shift;
	return 0;
}

static int parse_bool(const char *s, bool *out)
{
	static const char *const yes[] = {"true", "yes", "on", "1"};
	static const char *const no[] = {"false", "no", "off", "0"};
	for (size_t i = 0; i < 4; i++) {
		if (strcasecmp(s, yes[i]) == 0) {
			*out = true;
			return 0;
		}
		if (strcasecmp(s, no[i]) == 0) {
			*out = false;
			return 0;
		}
	}
	return -1;
}

static int set_string(struct parser *p, const char *key, char **field,
		      const char *value)
{
	char *copy = strdup(value);
	if (!copy)
		return fail(p, key, "out of memory");
	free(*field);
	*field = copy;
	return 1;
}

/* ---- [daemon] ---------------------------------------------------------- */

static int key_socket(struct parser *p, const char *key, const char *value)
{
	if (value[0] != '/')
		return fail_value(p, key, value, "must be an absolute path");
	if (strlen(value) > SUN_PATH_MAX) {
		char what[96];
		snprintf(what, sizeof(what),
			 "is longer than %zu bytes, the limit of a Unix socket path",
			 SUN_PATH_MAX);
		return fail_value(p, key, value, what);
	}
	return set_string(p, key, &p->cfg->socket_path, value);
}

static int key_socket_mode(struct parser *p, const char *key,
			   const char *value)
{
	uint64_t mode;
	if (parse_u64(value, 8, &mode) < 0 || mode > 0777)
		return fail_value(p, key, value,
				  "must be octal permission bits from 0000 to 0777");
	p->cfg->socket_mode = (mode_t)mode;
	return 1;
}

static int key_memory(struct parser *p, const char *key, const char *value)
{
	uint64_t bytes;
	if (config_parse_size(value, &bytes) < 0)
		return fail_value(p, key, value,
				  "must be a size like 4096, 512M or 1G (suffixes K, M, G, T; binary units)");
	if (bytes == 0)
		return fail_value(p, key, value, "must be more than 0");
	p->cfg->memory_bytes = bytes;
	p->memory_line = p->line;
	return 1;
}

static int key_open_fetch(struct parser *p, const char *key,
			  const char *value)
{
	if (strcmp(value, "block") && strcmp(value, "head"))
		return fail_value(p, key, value, "must be block or head");
	p->cfg->open_fetches_block = strcmp(value, "block") == 0;
	return 1;
}

/* HOST:PORT, [IPv6]:PORT, or a port alone (loopback): a non-loopback
 * endpoint is there only if its address is written out. No name lookup
 * but localhost: the daemon binds what the file says, nothing a resolver
 * could change. */
static int key_metrics_listen(struct parser *p, const char *key,
			      const char *value)
{
	static const char why[] =
		"must be HOST:PORT (an IPv4 address, [an IPv6 address] or "
		"localhost; port 1-65535), or a port alone for 127.0.0.1";
	char host[sizeof(p->cfg->metrics_host)] = "127.0.0.1";
	const char *port = value, *colon = strrchr(value, ':');
	if (value[0] == '[') {
		const char *end = strchr(value, ']');
		if (!end || end[1] != ':' || (size_t)(end - value - 1) >= sizeof(host))
			return fail_value(p, key, value, why);
		memcpy(host, value + 1, (size_t)(end - value - 1));
		host[end - value - 1] = 0;
		port = end + 2;
	} else if (colon) {
		if ((size_t)(colon - value) >= sizeof(host))
			return fail_value(p, key, value, why);
		if (colon != value) {
			memcpy(host, value, (size_t)(colon - value));
			host[colon - value] = 0;
		}
		port = colon + 1;
	}
	if (!strcmp(host, "localhost"))
		snprintf(host, sizeof(host), "127.0.0.1");
	unsigned char addr[16];
	uint64_t n;
	bool v6 = value[0] == '[';
	if (inet_pton(v6 ? AF_INET6 : AF_INET, host, addr) != 1 ||
	    parse_u64(port, 10, &n) < 0 || n < 1 || n > 65535)
		return fail_value(p, key, value, why);
	snprintf(p->cfg->metrics_host, sizeof(p->cfg->metrics_host), "%s",
		 host);
	p->cfg->metrics_port = (uint16_t)n;
	return 1;
}

static int key_prefetch_window(struct parser *p, const char *key,
			       const char *value)
{
	uint64_t bytes;
	if (config_parse_size(value, &bytes) < 0)
		return fail_value(p, key, value,
				  "must be a size like 64M or 1G (0: no prefetch)");
	p->cfg->prefetch_window_bytes = bytes;
	return 1;
}

static int key_tier_size(struct parser *p, const char *key,
			 const char *value)
{
	uint64_t bytes;
	if (config_parse_size(value, &bytes) < 0 || bytes < (16u << 20))
		return fail_value(p, key, value,
				  "must be a size of at least 16M, like 64G");
	p->cfg->tier_bytes = bytes;
	p->tier_line = p->line;
	return 1;
}

static int key_topology_file(struct parser *p, const char *key,
			     const char *value)
{
	if (access(value, R_OK) != 0)
		return fail_value(p, key, value, "cannot read the file");
	return set_string(p, key, &p->cfg->topology_file, value);
}

static int key_tier_path(struct parser *p, const char *key,
			 const char *value)
{
	if (value[0] != '/')
		return fail_value(p, key, value, "must be an absolute path");
	p->tier_line = p->line;
	return set_string(p, key, &p->cfg->tier_path, value);
}

static int key_block_size(struct parser *p, const char *key,
			  const char *value)
{
	uint64_t bytes;
	if (config_parse_size(value, &bytes) < 0 || bytes < (64u << 10) ||
	    bytes > (64u << 20) || (bytes & (bytes - 1)) != 0)
		return fail_value(p, key, value,
				  "must be a power of two from 64K to 64M");
	p->cfg->block_bytes = (uint32_t)bytes;
	p->block_line = p->line;
	return 1;
}

static int key_log_level(struct parser *p, const char *key,
			 const char *value)
{
	int level = rc_log_level_parse(value);
	if (level < 0)
		return fail_value(p, key, value,
				  "must be one of error, warn, info, debug");
	p->cfg->log_level = level;
	return 1;
}

/* ---- [s3] -------------------------------------------------------------- */

/* Checks scheme://host[:port][/path]; NULL if fine, else why not. */
static const char *endpoint_problem(const char *url)
{
	const char *rest;
	if (strncasecmp(url, "https://", 8) == 0)
		rest = url + 8;
	else if (strncasecmp(url, "http://", 7) == 0)
		rest = url + 7;
	else
		return "must start with http:// or https://";
	for (const char *c = url; *c; c++)
		if (isspace((unsigned char)*c) || iscntrl((unsigned char)*c))
			return "must not contain spaces or control characters";
	if (strpbrk(rest, "?#"))
		return "must not have a query or fragment";
	size_t auth_len = strcspn(rest, "/");
	if (auth_len == 0)
		return "has no host";
	if (memchr(rest, '@', auth_len))
		return "must not contain user info (use access_key and secret_key)";
	const char *host_end = rest;
	if (*rest == '[') { /* [IPv6]:port */
		host_end = memchr(rest, ']', auth_len);
		if (!host_end)
			return "has an unterminated [IPv6] host";
		host_end++;
	} else {
		host_end = rest + strcspn(rest, ":/");
		if (host_end == rest)
			return "has no host";
	}
	if (host_end < rest + auth_len) {
		if (*host_end != ':')
			return "has junk after the host";
		char port[8] = "";
		size_t plen = (size_t)(rest + auth_len - host_end - 1);
		if (plen == 0 || plen >= sizeof(port))
			return "has a bad port";
		memcpy(port, host_end + 1, plen);
		port[plen] = '\0';
		uint64_t n;
		if (parse_u64(port, 10, &n) < 0 || n == 0 || n > 65535)
			return "has a bad port";
	}
	return NULL;
}

static int key_endpoint(struct parser *p, const char *key, const char *value)
{
	const char *why = endpoint_problem(value);
	if (why)
		return fail_value(p, key, value, why);
	if (set_string(p, key, &p->cfg->endpoint, value) == 0)
		return 0;
	/* "http://host:9080/" and "http://host:9080" are the same endpoint. */
	char *ep = p->cfg->endpoint;
	size_t len = strlen(ep);
	while (len > 0 && ep[len - 1] == '/')
		ep[--len] = '\0';
	return 1;
}

static int key_region(struct parser *p, const char *key, const char *value)
{
	size_t len = strlen(value);
	if (len > 64 || strspn(value, "abcdefghijklmnopqrstuvwxyz"
				      "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
				      "0123456789-_") != len)
		return fail_value(p, key, value,
				  "must be a region name like us-east-1");
	return set_string(p, key, &p->cfg->region, value);
}

static int key_addressing(struct parser *p, const char *key,
			  const char *value)
{
	if (strcmp(value, "path") == 0)
		p->cfg->addressing = S3_PATH_STYLE;
	else if (strcmp(value, "virtual") == 0)
		p->cfg->addressing = S3_VIRTUAL_HOSTED;
	else
		return fail_value(p, key, value, "must be path or virtual");
	p->addressing_line = p->line;
	return 1;
}

static int key_ca_file(struct parser *p, const char *key, const char *value)
{
	if (access(value, R_OK) != 0) {
		char what[128];
		snprintf(what, sizeof(what), "cannot read the file: %s",
			 strerror(errno));
		return fail_value(p, key, value, what);
	}
	return set_string(p, key, &p->cfg->ca_file, value);
}

/* A missing file, or a directory, would only show at start or at the
 * first fetch, without this file and line: say so when the config is
 * checked. */
static int key_credentials_file(struct parser *p, const char *key,
				const char *value)
{
	struct stat st;
	char what[128];
	if (access(value, R_OK) != 0 || stat(value, &st) != 0) {
		snprintf(what, sizeof(what), "cannot read the file: %s",
			 strerror(errno));
		return fail_value(p, key, value, what);
	}
	if (!S_ISREG(st.st_mode)) {
		snprintf(what, sizeof(what), "not a regular file (%s)",
			 S_ISDIR(st.st_mode) ? "a directory" : "a device, "
			 "socket or pipe");
		return fail_value(p, key, value, what);
	}
	return set_string(p, key, &p->cfg->credentials_file, value);
}

static const char *const creds_names[] = {
	[CREDS_AUTO] = "auto",           [CREDS_CONFIG] = "config",
	[CREDS_ENV] = "env",             [CREDS_FILE] = "file",
	[CREDS_CONTAINER] = "container", [CREDS_IMDS] = "imds",
	[CREDS_ANONYMOUS] = "anonymous",
};

static int key_credentials(struct parser *p, const char *key,
			   const char *value)
{
	for (size_t i = 0; i < sizeof(creds_names) / sizeof(creds_names[0]);
	     i++) {
		if (strcmp(value, creds_names[i]) == 0) {
			p->cfg->creds_source = (enum creds_source)i;
			p->credentials_line = p->line;
			return 1;
		}
	}
	return fail_value(p, key, value,
			  "must be one of auto, config, env, file, container, imds, anonymous");
}

/* A pasted key with a stray blank would only fail later as a signature
 * mismatch; say so now. */
static int set_credential(struct parser *p, const char *key, char **field,
			  int *line, const char *value)
{
	for (const char *c = value; *c; c++)
		if (isspace((unsigned char)*c) || iscntrl((unsigned char)*c))
			return fail_value(p, key, value,
					  "must not contain spaces or control characters");
	*line = p->line;
	return set_string(p, key, field, value);
}

static int key_access_key(struct parser *p, const char *key,
			  const char *value)
{
	return set_credential(p, key, &p->cfg->access_key,
			      &p->access_key_line, value);
}

static int key_secret_key(struct parser *p, const char *key,
			  const char *value)
{
	return set_credential(p, key, &p->cfg->secret_key,
			      &p->secret_key_line, value);
}

static int key_session_token(struct parser *p, const char *key,
			     const char *value)
{
	return set_credential(p, key, &p->cfg->session_token,
			      &p->session_token_line, value);
}

/* ---- [dataset NAME] ---------------------------------------------------- */

static struct rc_dataset_config *current_dataset(struct parser *p)
{
	return &p->cfg->datasets[p->cfg->n_datasets - 1];
}

static bool looks_like_ipv4(const char *s)
{
	int parts = 0;
	while (*s) {
		size_t n = strspn(s, "0123456789");
		if (n == 0)
			return false;
		parts++;
		s += n;
		if (*s == '.')
			s++;
		else if (*s)
			return false;
	}
	return parts == 4;
}

static bool has_prefix(const char *s, const char *prefix)
{
	return strncmp(s, prefix, strlen(prefix)) == 0;
}

static bool has_suffix(const char *s, const char *suffix)
{
	size_t ls = strlen(s), lx = strlen(suffix);
	return ls >= lx && strcmp(s + ls - lx, suffix) == 0;
}

/* S3's bucket naming rules; NULL if the name is valid. */
static const char *bucket_problem(const char *b)
{
	size_t len = strlen(b);
	if (len < 3 || len > 63)
		return "bucket name must be 3 to 63 characters";
	if (strspn(b, "abcdefghijklmnopqrstuvwxyz0123456789.-") != len)
		return "bucket name may only hold lowercase letters, digits, '.' and '-'";
	if (!isalnum((unsigned char)b[0]) || !isalnum((unsigned char)b[len - 1]))
		return "bucket name must begin and end with a letter or digit";
	if (strstr(b, "..") || strstr(b, ".-") || strstr(b, "-."))
		return "bucket name must not hold '..', '.-' or '-.'";
	if (looks_like_ipv4(b))
		return "bucket name must not look like an IP address";
	if (has_prefix(b, "xn--") || has_prefix(b, "sthree-") ||
	    has_suffix(b, "-s3alias") || has_suffix(b, "--ol-s3"))
		return "bucket name uses a prefix or suffix that S3 reserves";
	return NULL;
}

/* Splits s3://bucket[/prefix] into owned bucket and prefix ("" or ending
 * in '/'); NULL if fine, else why not (nothing is allocated then). */
static const char *split_s3_uri(const char *uri, char **bucket, char **prefix)
{
	if (strncmp(uri, "s3://", 5) != 0)
		return "must be an s3:// URI like s3://bucket/prefix/";
	for (const char *c = uri; *c; c++)
		if (iscntrl((unsigned char)*c))
			return "must not contain control characters";
	const char *b = uri + 5;
	size_t blen = strcspn(b, "/");
	const char *rest = b[blen] == '/' ? b + blen + 1 : b + blen;
	if (blen == 0)
		return "has no bucket name";
	if (*rest == '/' || strstr(rest, "//"))
		return "prefix has an empty path segment ('//')";
	char *bk = strndup(b, blen);
	if (!bk)
		return "out of memory";
	const char *why = bucket_problem(bk);
	if (why) {
		free(bk);
		return why;
	}
	size_t plen = strlen(rest);
	bool add_slash = plen > 0 && rest[plen - 1] != '/';
	char *px = malloc(plen + 2);
	if (!px) {
		free(bk);
		return "out of memory";
	}
	memcpy(px, rest, plen);
	if (add_slash)
		px[plen++] = '/';
	px[plen] = '\0';
	*bucket = bk;
	*prefix = px;
	return NULL;
}

static int key_uri(struct parser *p, const char *key, const char *value)
{
	struct rc_dataset_config *ds = current_dataset(p);
	char *bucket, *prefix;
	const char *why = split_s3_uri(value, &bucket, &prefix);
	if (why)
		return fail_value(p, key, value, why);
	ds->bucket = bucket;
	ds->prefix = prefix;
	return set_string(p, key, &ds->uri, value);
}

/* getpwnam_r/getgrnam_r with a growing buffer: 1 found, 0 not, -1 error. */
static int lookup_id(const char *name, bool group, uint32_t *id)
{
	char *buf = NULL;
	uint32_t size = 0;
	int rc;
	for (;;) {
		if (RC_GROW_FROM(buf, size, (uint64_t)size + 1, 1024)) {
			free(buf);
			return -1;
		}
		if (group) {
			struct group gr, *found = NULL;
			rc = getgrnam_r(name, &gr, buf, size, &found);
			if (rc == 0 && found)
				*id = gr.gr_gid;
			if (rc == 0)
				rc = found ? 1 : 0;
			else if (rc == ERANGE && size < (1u << 20))
				continue;
			else
				rc = -1;
		} else {
			struct passwd pw, *found = NULL;
			rc = getpwnam_r(name, &pw, buf, size, &found);
			if (rc == 0 && found)
				*id = pw.pw_uid;
			if (rc == 0)
				rc = found ? 1 : 0;
			else if (rc == ERANGE && size < (1u << 20))
				continue;
			else
				rc = -1;
		}
		free(buf);
		return rc;
	}
}

/* Parses "0, alice, 1001" into ids[]; numbers or names looked up in the
 * user (or group) database. On error writes why into `why`. */
static int parse_id_list(const char *value, bool group, uint32_t **out,
			 size_t *n_out, char *why, size_t whylen)
{
	char *copy = strdup(value);
	uint32_t *ids = calloc(strlen(value) / 2 + 1, sizeof(*ids));
	size_t n = 0;
	if (!copy || !ids) {
		snprintf(why, whylen, "out of memory");
		goto fail;
	}
	char *cursor = copy;
	char *tok;
	while ((tok = strsep(&cursor, ",")) != NULL) {
		while (isspace((unsigned char)*tok))
			tok++;
		size_t len = strlen(tok);
		while (len > 0 && isspace((unsigned char)tok[len - 1]))
			tok[--len] = '\0';
		uint64_t num;
		if (len == 0) {
			snprintf(why, whylen, "has an empty entry");
			goto fail;
		} else if (strcmp(tok, "*") == 0) {
			snprintf(why, whylen, group ?
				 "'*' is not allowed here: use allow_uids = * to admit everyone" :
				 "'*' must be the only entry");
			goto fail;
		} else if (isdigit((unsigned char)tok[0])) {
			if (parse_u64(tok, 10, &num) < 0 || num >= UINT32_MAX) {
				snprintf(why, whylen, "'%.40s' is not a valid %s",
					 tok, group ? "gid" : "uid");
				goto fail;
			}
			ids[n++] = (uint32_t)num;
		} else {
			uint32_t id;
			int found = lookup_id(tok, group, &id);
			if (found <= 0) {
				snprintf(why, whylen, "%s '%.40s'%s",
					 group ? "unknown group" : "unknown user",
					 tok, found < 0 ? " (lookup failed)" : "");
				goto fail;
			}
			ids[n++] = id;
		}
	}
	free(copy);
	*out = ids;
	*n_out = n;
	return 0;
fail:
	free(copy);
	free(ids);
	return -1;
}

/* A uid or gid list key: "*" (uids only) or ids and names, comma
 * separated, into *ids / *n. */
static int set_id_list(struct parser *p, const char *key, const char *value,
		       bool groups, bool *all, uint32_t **ids, size_t *n)
{
	if (all && strcmp(value, "*") == 0) {
		*all = true;
		return 1;
	}
	char why[128];
	if (parse_id_list(value, groups, ids, n, why, sizeof(why)) < 0)
		return fail_value(p, key, value, why);
	return 1;
}

_Static_assert(sizeof(uid_t) == sizeof(uint32_t), "uid_t is 32 bits");
_Static_assert(sizeof(gid_t) == sizeof(uint32_t), "gid_t is 32 bits");

static int key_allow_uids(struct parser *p, const char *key,
			  const char *value)
{
	struct rc_dataset_config *ds = current_dataset(p);
	return set_id_list(p, key, value, false, &ds->allow_all,
			   (uint32_t **)&ds->uids, &ds->n_uids);
}

static int key_allow_gids(struct parser *p, const char *key,
			  const char *value)
{
	struct rc_dataset_config *ds = current_dataset(p);
	return set_id_list(p, key, value, true, NULL, (uint32_t **)&ds->gids,
			   &ds->n_gids);
}

static int key_writable(struct parser *p, const char *key, const char *value)
{
	if (parse_bool(value, &current_dataset(p)->writable) < 0)
		return fail_value(p, key, value, "must be true or false");
	return 1;
}

static int key_write_uids(struct parser *p, const char *key,
			  const char *value)
{
	struct rc_dataset_config *ds = current_dataset(p);
	return set_id_list(p, key, value, false, &ds->write_all,
			   (uint32_t **)&ds->write_uids, &ds->n_write_uids);
}

static int key_write_gids(struct parser *p, const char *key,
			  const char *value)
{
	struct rc_dataset_config *ds = current_dataset(p);
	return set_id_list(p, key, value, true, NULL,
			   (uint32_t **)&ds->write_gids, &ds->n_write_gids);
}

static int key_durability(struct parser *p, const char *key,
			  const char *value)
{
	static const char *const names[] = {"memory", "local", "s3"};
	for (int i = 0; i < 3; i++) {
		if (strcmp(value, names[i]) == 0) {
			current_dataset(p)->durability = (enum rc_durability)i;
			return 1;
		}
	}
	return fail_value(p, key, value, "must be memory, local or s3");
}

/* S3's part sizes (and CopyObject's limit): 5M to 5G. 1, or fail_value. */
static int part_range_size(struct parser *p, const char *key,
			   const char *value, uint64_t *out)
{
	uint64_t bytes;
	if (config_parse_size(value, &bytes) < 0 || bytes < (5ull << 20) ||
	    bytes > (5ull << 30))
		return fail_value(p, key, value, "must be a size from 5M to 5G");
	*out = bytes;
	return 1;
}

static int key_part_size(struct parser *p, const char *key, const char *value)
{
	return part_range_size(p, key, value, &current_dataset(p)->part_size);
}

/* Up to it a RENAME after upload is one CopyObject (S3 copies at most
 * 5 GiB that way), above it a multipart copy; lower only to test that. */
static int key_copy_threshold(struct parser *p, const char *key,
			      const char *value)
{
	return part_range_size(p, key, value,
			       &current_dataset(p)->copy_threshold);
}

static int key_max_object_size(struct parser *p, const char *key,
			       const char *value)
{
	uint64_t bytes;
	if (config_parse_size(value, &bytes) < 0 || bytes < 1 ||
	    bytes > RC_S3_MAX_OBJECT)
		return fail_value(p, key, value, "must be a size from 1 to 5T");
	current_dataset(p)->max_object_size = bytes;
	return 1;
}

static int key_overwrite(struct parser *p, const char *key, const char *value)
{
	bool overwrite;
	if (parse_bool(value, &overwrite) < 0)
		return fail_value(p, key, value, "must be true or false");
	current_dataset(p)->no_overwrite = !overwrite;
	return 1;
}

static int key_upload_concurrency(struct parser *p, const char *key,
				  const char *value)
{
	char *end;
	errno = 0;
	unsigned long n = strtoul(value, &end, 10);
	if (errno || *end || n < 1 || n > 64)
		return fail_value(p, key, value, "must be a number from 1 to 64");
	current_dataset(p)->upload_concurrency = (uint32_t)n;
	return 1;
}

/* Requests/s of the prefix's budget (budget.h); 0: not shaped. */
static int key_rate(struct parser *p, const char *key, const char *value,
		    uint32_t *field)
{
	char *end;
	errno = 0;
	unsigned long n = strtoul(value, &end, 10);
	if (errno || *end || value[0] == '-' || n > 1000000)
		return fail_value(p, key, value,
				  "must be requests/s from 0 (off) to 1000000");
	*field = (uint32_t)n;
	return 1;
}

static int key_s3_get_rate(struct parser *p, const char *key,
			   const char *value)
{
	return key_rate(p, key, value, &current_dataset(p)->s3_get_rate);
}

static int key_s3_put_rate(struct parser *p, const char *key,
			   const char *value)
{
	return key_rate(p, key, value, &current_dataset(p)->s3_put_rate);
}

static int key_journal(struct parser *p, const char *key, const char *value)
{
	if (value[0] != '/')
		return fail_value(p, key, value, "must be an absolute path");
	return set_string(p, key, &p->cfg->journal_path, value);
}

static int key_size_field(struct parser *p, const char *key, const char *value,
			  uint64_t min, uint64_t *field)
{
	uint64_t bytes;
	if (config_parse_size(value, &bytes) < 0 || bytes < min)
		return fail_value(p, key, value, "must be a size like 512M or 8G");
	*field = bytes;
	return 1;
}

/* 0: the automatic value (a share of memory). */
static int key_limit_bytes(struct parser *p, const char *key,
			   const char *value, uint64_t *field)
{
	uint64_t bytes;
	if (config_parse_size(value, &bytes) < 0)
		return fail_value(p, key, value,
				  "must be a size like 64M or 1G (0: automatic)");
	*field = bytes;
	return 1;
}

static int key_max_leased_per_session(struct parser *p, const char *key,
				      const char *value)
{
	return key_limit_bytes(p, key, value, &p->cfg->max_leased_per_session);
}

static int key_max_leased_per_uid(struct parser *p, const char *key,
				  const char *value)
{
	return key_limit_bytes(p, key, value, &p->cfg->max_leased_per_uid);
}

static int key_max_inflight_per_session(struct parser *p, const char *key,
					const char *value)
{
	return key_limit_bytes(p, key, value,
			       &p->cfg->max_inflight_per_session);
}

static int key_max_inflight_per_uid(struct parser *p, const char *key,
				    const char *value)
{
	return key_limit_bytes(p, key, value, &p->cfg->max_inflight_per_uid);
}

static int key_max_pinned_per_uid(struct parser *p, const char *key,
				  const char *value)
{
	return key_limit_bytes(p, key, value, &p->cfg->max_pinned_per_uid);
}

static int key_max_registered(struct parser *p, const char *key,
			      const char *value)
{
	return key_size_field(p, key, value, 4096, &p->cfg->max_registered);
}

static int key_max_registered_per_uid(struct parser *p, const char *key,
				      const char *value)
{
	return key_size_field(p, key, value, 4096,
			      &p->cfg->max_registered_per_uid);
}

static int key_metadata_memory(struct parser *p, const char *key,
			       const char *value)
{
	return key_limit_bytes(p, key, value, &p->cfg->metadata_bytes);
}

static int key_max_staged_per_uid(struct parser *p, const char *key,
				  const char *value)
{
	return key_limit_bytes(p, key, value, &p->cfg->max_staged_per_uid);
}

static int key_journal_size(struct parser *p, const char *key,
			    const char *value)
{
	return key_size_field(p, key, value, 16u << 20, &p->cfg->journal_bytes);
}

static int key_staging_memory(struct parser *p, const char *key,
			      const char *value)
{
	return key_size_field(p, key, value, 16u << 20, &p->cfg->staging_bytes);
}

/* ---- key tables -------------------------------------------------------- */

typedef int (*key_fn)(struct parser *p, const char *key, const char *value);

enum key_type { K_FN, K_U32, K_BOOL, K_STR };

struct key_spec {
	const char *name;
	enum key_type type;
	key_fn fn;          /* K_FN */
	size_t off;         /* K_U32, K_BOOL, K_STR: field of struct rc_config */
	uint32_t min, max;  /* K_U32 */
};

#define FN(n, f) {.name = n, .type = K_FN, .fn = f}
#define U32(n, field, lo, hi)                                               \
	{.name = n, .type = K_U32, .off = offsetof(struct rc_config, field), \
	 .min = lo, .max = hi}
#define BOOL(n, field)                                                       \
	{.name = n, .type = K_BOOL, .off = offsetof(struct rc_config, field)}
#define STR(n, field)                                                        \
	{.name = n, .type = K_STR, .off = offsetof(struct rc_config, field)}

static const struct key_spec daemon_keys[] = {
	FN("socket", key_socket),
	FN("socket_mode", key_socket_mode),
	FN("memory", key_memory),
	FN("block_size", key_block_size),
	FN("log_level", key_log_level),
	BOOL("mlock", mlock),
	BOOL("hugepages", hugepages),
	U32("metadata_ttl", metadata_ttl_s, 0, 30 * 86400),
	FN("metadata_memory", key_metadata_memory),
	U32("max_sessions", max_sessions, 1, 65536),
	U32("root_reserved_sessions", root_reserved_sessions, 0, 65535),
	U32("max_sessions_per_uid", max_sessions_per_uid, 1, 65536),
	FN("max_leased_per_session", key_max_leased_per_session),
	FN("max_leased_per_uid", key_max_leased_per_uid),
	FN("max_inflight_per_session", key_max_inflight_per_session),
	FN("max_inflight_per_uid", key_max_inflight_per_uid),
	FN("max_pinned_per_uid", key_max_pinned_per_uid),
	U32("max_plan_entries", max_plan_entries, 1, RC_MAX_PLAN_ENTRIES),
	U32("max_plan_entries_per_uid", max_plan_entries_per_uid, 1,
	    1u << 30),
	U32("max_handles", max_handles, 1, 1u << 24),
	FN("max_registered", key_max_registered),
	U32("max_handles_per_uid", max_handles_per_uid, 1, 1u << 28),
	U32("max_leases_per_uid", max_leases_per_uid, 1, 1u << 28),
	FN("max_registered_per_uid", key_max_registered_per_uid),
	FN("open_fetch", key_open_fetch),
	FN("prefetch_window", key_prefetch_window),
	U32("prefetch_window_entries", prefetch_window_entries, 1, 1u << 20),
	U32("prefetch_inflight", prefetch_inflight, 1, 1024),
	U32("shards", shards, 0, 16),
	FN("topology_file", key_topology_file),
	FN("journal", key_journal),
	FN("journal_size", key_journal_size),
	FN("staging_memory", key_staging_memory),
	FN("max_staged_per_uid", key_max_staged_per_uid),
	FN("tier_path", key_tier_path),
	FN("tier_size", key_tier_size),
	FN("metrics_listen", key_metrics_listen),
	{0},
};

static const struct key_spec s3_keys[] = {
	FN("endpoint", key_endpoint),
	FN("region", key_region),
	FN("addressing", key_addressing),
	BOOL("tls_verify", tls_verify),
	FN("ca_file", key_ca_file),
	U32("max_connections", max_connections, 1, 1024),
	U32("max_retries", max_retries, 0, 20),
	U32("retry_budget", retry_budget_s, 1, 86400),
	U32("connect_timeout_ms", connect_timeout_ms, 1, 600000),
	U32("request_timeout_ms", request_timeout_ms, 1, 3600000),
	FN("credentials", key_credentials),
	FN("access_key", key_access_key),
	FN("secret_key", key_secret_key),
	FN("session_token", key_session_token),
	STR("profile", profile),
	FN("credentials_file", key_credentials_file),
	{0},
};

static const struct key_spec dataset_keys[] = {
	FN("uri", key_uri),
	FN("allow_uids", key_allow_uids),
	FN("allow_gids", key_allow_gids),
	FN("writable", key_writable),
	FN("write_uids", key_write_uids),
	FN("write_gids", key_write_gids),
	FN("durability", key_durability),
	FN("part_size", key_part_size),
	FN("copy_threshold", key_copy_threshold),
	FN("upload_concurrency", key_upload_concurrency),
	FN("max_object_size", key_max_object_size),
	FN("overwrite", key_overwrite),
	FN("s3_get_rate", key_s3_get_rate),
	FN("s3_put_rate", key_s3_put_rate),
	{0},
};

/* seen_line has a slot per key of a section: a table that outgrew it
 * would write past it, so it cannot build. */
#define KEYS_FIT(t) \
	_Static_assert(sizeof(t) / sizeof((t)[0]) - 1 <= MAX_KEYS_PER_SECTION, \
		       #t " has more keys than MAX_KEYS_PER_SECTION")
KEYS_FIT(daemon_keys);
KEYS_FIT(s3_keys);
KEYS_FIT(dataset_keys);

static int apply_key(struct parser *p, const struct key_spec *k,
		     const char *value)
{
	char *field = (char *)p->cfg + k->off;
	uint64_t n;
	char what[96];
	switch (k->type) {
	case K_FN:
		return k->fn(p, k->name, value);
	case K_U32:
		if (parse_u64(value, 10, &n) < 0 || n < k->min || n > k->max) {
			snprintf(what, sizeof(what),
				 "must be a whole number from %u to %u",
				 k->min, k->max);
			return fail_value(p, k->name, value, what);
		}
		*(uint32_t *)(void *)field = (uint32_t)n;
		return 1;
	case K_BOOL:
		if (parse_bool(value, (bool *)field) < 0)
			return fail_value(p, k->name, value,
					  "must be true or false (also yes/no, on/off, 1/0)");
		return 1;
	case K_STR:
		return set_string(p, k->name, (char **)(void *)field, value);
	}
	return fail(p, k->name, "internal error: bad key type");
}

static void list_keys(const struct key_spec *keys, char *out, size_t len)
{
	size_t used = 0;
	out[0] = '\0';
	for (const struct key_spec *k = keys; k->name && used < len; k++) {
		int w = snprintf(out + used, len - used, "%s%s",
				 k == keys ? "" : ", ", k->name);
		if (w < 0)
			break;
		used += (size_t)w;
	}
}

/* Levenshtein distance, case-insensitive; keys are short (< 64 bytes),
 * longer words are as far from every key as they are long. */
static size_t edit_distance(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b), row[64];
	if (la >= 64 || lb >= 64)
		return la > lb ? la : lb;
	for (size_t j = 0; j <= lb; j++)
		row[j] = j;
	for (size_t i = 1; i <= la; i++) {
		size_t diag = row[0];
		row[0] = i;
		for (size_t j = 1; j <= lb; j++) {
			size_t up = row[j];
			size_t sub = diag + (tolower((unsigned char)a[i - 1]) !=
					     tolower((unsigned char)b[j - 1]));
			size_t best = up + 1 < row[j - 1] + 1 ? up + 1
							      : row[j - 1] + 1;
			row[j] = sub < best ? sub : best;
			diag = up;
		}
	}
	return row[lb];
}

/* The key a typo most likely meant: the nearest by edit distance, if it
 * is near enough (a third of the word, at least 2 edits) to be a slip
 * of the fingers rather than another word. */
static const char *nearest_key(const struct key_spec *keys, const char *name)
{
	const char *best = NULL;
	size_t best_d = SIZE_MAX, len = strlen(name);
	size_t limit = len / 3 > 2 ? len / 3 : 2;
	for (const struct key_spec *k = keys; k->name; k++) {
		size_t d = edit_distance(name, k->name);
		if (d < best_d) {
			best_d = d;
			best = k->name;
		}
	}
	return best_d <= limit ? best : NULL;
}

static bool has_key(const struct key_spec *keys, const char *name)
{
	for (const struct key_spec *k = keys; k->name; k++)
		if (strcmp(k->name, name) == 0)
			return true;
	return false;
}

/* An unknown key's error: the section it belongs to if it is another's,
 * else the nearest key of this one, else the whole list of this one's. */
static int fail_unknown_key(struct parser *p, const struct key_spec *keys,
			    const char *name)
{
	static const struct {
		const char *section;
		const struct key_spec *keys;
	} sections[] = {
		{"[daemon]", daemon_keys},
		{"[s3]", s3_keys},
		{"[dataset NAME]", dataset_keys},
	};
	for (size_t i = 0; i < sizeof(sections) / sizeof(sections[0]); i++)
		if (sections[i].keys != keys && has_key(sections[i].keys, name))
			return fail(p, name, "unknown key in this section "
				    "(it belongs in %s)", sections[i].section);
	const char *near = nearest_key(keys, name);
	if (near)
		return fail(p, name, "unknown key (did you mean '%s'?)", near);
	char valid[900];
	list_keys(keys, valid, sizeof(valid));
	return fail(p, name, "unknown key (valid keys: %s)", valid);
}

static int record_value(struct parser *p, const char *section,
			const char *key, const char *value)
{
	struct rc_config *cfg = p->cfg;
	if (RC_GROW(cfg->values, cfg->values_cap, cfg->n_values + 1))
		return fail(p, key, "out of memory");
	struct rc_config_value *v = &cfg->values[cfg->n_values];
	v->section = section;
	v->key = strdup(key);
	v->value = strdup(value);
	cfg->n_values++;
	if (!v->key || !v->value)
		return fail(p, key, "out of memory");
	return 1;
}

/* Checks and applies one key = value line of the current section. */
static int apply_line(struct parser *p, const char *name, const char *value)
{
	const struct key_spec *keys;
	switch (p->sec) {
	case SEC_DAEMON: keys = daemon_keys; break;
	case SEC_S3: keys = s3_keys; break;
	case SEC_DATASET: keys = dataset_keys; break;
	case SEC_NONE:
		return fail_at(p, p->line, "", name,
			       "key outside of any section (put it under [daemon], [s3] or [dataset NAME])");
	default:
		return 1; /* in a section already reported as bad */
	}
	size_t i = 0;
	while (keys[i].name && strcmp(keys[i].name, name) != 0)
		i++;
	if (!keys[i].name)
		return fail_unknown_key(p, keys, name);
	if (p->seen_line[i])
		return fail(p, name, "duplicate key (first set on line %d)",
			    p->seen_line[i]);
	p->seen_line[i] = p->line;
	if (value[0] == '\0')
		return fail(p, name,
			    "empty value (remove the line to use the default)");
	int ok = apply_key(p, &keys[i], value);
	if (ok && p->sec != SEC_DATASET)
		ok = record_value(p, keys == daemon_keys ? "daemon" : "s3",
				  keys[i].name, value);
	return ok;
}

/* ---- sections and lines ------------------------------------------------ */

static bool valid_dataset_name(const char *name)
{
	size_t len = strlen(name);
	return len >= 1 && len <= DATASET_NAME_MAX &&
	       strspn(name, "abcdefghijklmnopqrstuvwxyz"
			    "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-") == len;
}

static void open_dataset(struct parser *p, const char *name)
{
	struct rc_config *cfg = p->cfg;
	snprintf(p->label, sizeof(p->label), "dataset %.63s", name);
	if (!valid_dataset_name(name)) {
		fail(p, NULL,
		     "bad dataset name (1 to 63 of A-Z a-z 0-9 _ . -) (got '%.70s')",
		     name);
		return;
	}
	for (size_t i = 0; i < cfg->n_datasets; i++) {
		if (strcmp(cfg->datasets[i].name, name) == 0) {
			fail(p, NULL, "duplicate dataset (first defined on line %d)",
			     cfg->datasets[i].line);
			return;
		}
	}
	if (RC_GROW(cfg->datasets, cfg->datasets_cap, cfg->n_datasets + 1) ||
	    RC_GROW(p->ds_failed, p->ds_failed_cap, cfg->n_datasets + 1)) {
		fail(p, NULL, "out of memory");
		return;
	}
	p->ds_failed[cfg->n_datasets] = false;
	struct rc_dataset_config *ds = &cfg->datasets[cfg->n_datasets];
	memset(ds, 0, sizeof(*ds));
	ds->line = p->line;
	ds->durability = DURABILITY_LOCAL;
	ds->part_size = 64ull << 20;
	ds->copy_threshold = 5ull << 30;
	ds->upload_concurrency = 4;
	ds->max_object_size = RC_S3_MAX_OBJECT;
	ds->s3_get_rate = 5500;
	ds->s3_put_rate = 3500;
	ds->name = strdup(name);
	if (!ds->name) {
		fail(p, NULL, "out of memory");
		return;
	}
	cfg->n_datasets++;
	p->sec = SEC_DATASET;
}

static void open_single(struct parser *p, int *first_line,
			enum section_kind kind)
{
	if (*first_line) {
		fail(p, NULL, "section appears twice (first on line %d)",
		     *first_line);
		return;
	}
	*first_line = p->line;
	p->sec = kind;
}

static void begin_section(struct parser *p, const char *name)
{
	memset(p->seen_line, 0, sizeof(p->seen_line));
	p->section_failed = false;
	p->sec = SEC_INVALID; /* until proven otherwise */
	snprintf(p->label, sizeof(p->label), "%s", name);
}

/* The reader's callbacks. */
static void on_section(void *user, int line, const char *name)
{
	struct parser *p = user;

	p->line = line;
	begin_section(p, name);
	if (strcmp(name, "daemon") == 0) {
		open_single(p, &p->daemon_line, SEC_DAEMON);
	} else if (strcmp(name, "s3") == 0) {
		open_single(p, &p->s3_line, SEC_S3);
	} else if (strncmp(name, "dataset", 7) == 0 &&
		   (name[7] == ' ' || name[7] == '\t')) {
		open_dataset(p, name + 8 + strspn(name + 8, " \t"));
	} else if (strcmp(name, "dataset") == 0) {
		fail(p, NULL, "a dataset section needs a name: [dataset NAME]");
	} else {
		fail(p, NULL,
		     "unknown section (valid: [daemon], [s3], [dataset NAME])");
	}
}

static void on_key(void *user, int line, const char *name, const char *value)
{
	struct parser *p = user;

	p->line = line;
	apply_line(p, name, value);
}

static void on_error(void *user, int line, enum ini_fault fault,
		     const char *header, const char *what)
{
	struct parser *p = user;

	p->line = line;
	if (fault == INI_FAULT_HEADER)
		begin_section(p, header);
	/* A syntax error is not about the section it happens to be in. */
	fail_at(p, line, fault == INI_FAULT_SYNTAX ? "" : p->label, NULL,
		"%s", what);
}

static const struct ini_reader config_reader = {
	.max_line = CONFIG_MAX_LINE,
	.section = on_section,
	.key = on_key,
	.error = on_error,
};

/* ---- whole-file checks ------------------------------------------------- */

static bool same_ids(const uint32_t *a, size_t na, const uint32_t *b,
		     size_t nb)
{
	for (size_t i = 0; i < na; i++) {
		size_t j = 0;
		while (j < nb && b[j] != a[i])
			j++;
		if (j == nb)
			return false;
	}
	for (size_t j = 0; j < nb; j++) {
		size_t i = 0;
		while (i < na && a[i] != b[j])
			i++;
		if (i == na)
			return false;
	}
	return true;
}

bool config_dataset_same_acl(const struct rc_dataset_config *a,
			     const struct rc_dataset_config *b)
{
	return a->allow_all == b->allow_all &&
	       same_ids(a->uids, a->n_uids, b->uids, b->n_uids) &&
	       same_ids(a->gids, a->n_gids, b->gids, b->n_gids) &&
	       a->writable == b->writable && a->write_all == b->write_all &&
	       same_ids(a->write_uids, a->n_write_uids, b->write_uids,
			b->n_write_uids) &&
	       same_ids(a->write_gids, a->n_write_gids, b->write_gids,
			b->n_write_gids);
}

/* True if one dataset's keys include the other's: same bucket, and one
 * prefix starts the other (equal prefixes too). */
static bool datasets_overlap(const struct rc_dataset_config *a,
			     const struct rc_dataset_config *b)
{
	size_t la = strlen(a->prefix), lb = strlen(b->prefix);
	return strcmp(a->bucket, b->bucket) == 0 &&
	       strncmp(a->prefix, b->prefix, la < lb ? la : lb) == 0;
}

/* A root-only dataset inside a public one would be readable through the
 * public one: the ACL of a key must not depend on which name reads it. */
static void check_overlaps(struct parser *p)
{
	struct rc_config *cfg = p->cfg;
	for (size_t i = 0; i < cfg->n_datasets; i++) {
		const struct rc_dataset_config *a = &cfg->datasets[i];
		if (p->ds_failed[i] || !a->uri)
			continue;
		for (size_t j = i + 1; j < cfg->n_datasets; j++) {
			const struct rc_dataset_config *b = &cfg->datasets[j];
			if (p->ds_failed[j] || !b->uri ||
			    !datasets_overlap(a, b) || config_dataset_same_acl(a, b))
				continue;
			char label[80];
			snprintf(label, sizeof(label), "dataset %s", b->name);
			fail_at(p, b->line, label, "uri",
				"s3://%s/%s overlaps dataset %s (line %d, s3://%s/%s) "
				"and their allow_*/write_* differ: the keys both hold "
				"would be reachable under the looser one; give them "
				"the same ACL or disjoint prefixes",
				b->bucket, b->prefix, a->name, a->line, a->bucket,
				a->prefix);
		}
	}
}

static void check_datasets(struct parser *p)
{
	struct rc_config *cfg = p->cfg;
	if (cfg->n_datasets == 0) {
		if (p->failed)
			return; /* a bad [dataset ...] header said enough */
		fail_at(p, p->line > 0 ? p->line : 1, "dataset NAME", NULL,
			"no dataset configured: add a [dataset NAME] section with uri = s3://bucket/prefix/");
		return;
	}
	for (size_t i = 0; i < cfg->n_datasets; i++) {
		struct rc_dataset_config *ds = &cfg->datasets[i];
		if (p->ds_failed[i])
			continue; /* its own error is reported */
		char label[80];
		snprintf(label, sizeof(label), "dataset %s", ds->name);
		if (!ds->uri) {
			fail_at(p, ds->line, label, "uri",
				"missing required key (e.g. uri = s3://bucket/prefix/)");
			continue;
		}
		if (ds->writable && ds->durability == DURABILITY_LOCAL &&
		    !cfg->journal_path && !p->daemon_failed) {
			fail_at(p, ds->line, label, "durability",
				"durability = local needs journal = PATH in [daemon] (or durability = memory | s3)");
			continue;
		}
		/* Secure default: nobody but the daemon's user (and root). */
		if (!ds->allow_all && ds->n_uids == 0 && ds->n_gids == 0) {
			ds->uids = malloc(sizeof(*ds->uids));
			if (!ds->uids) {
				fail_at(p, ds->line, label, NULL, "out of memory");
				return;
			}
			ds->uids[0] = geteuid();
			ds->n_uids = 1;
		}
	}
	check_overlaps(p);
}

static void check_credentials(struct parser *p)
{
	struct rc_config *cfg = p->cfg;
	if (cfg->access_key && !cfg->secret_key) {
		fail_at(p, p->access_key_line, "s3", "access_key",
			"access_key is set but secret_key is missing: set both access_key and secret_key");
	} else if (cfg->secret_key && !cfg->access_key) {
		fail_at(p, p->secret_key_line, "s3", "secret_key",
			"secret_key is set but access_key is missing: set both access_key and secret_key");
	} else if (cfg->session_token && !cfg->access_key) {
		fail_at(p, p->session_token_line, "s3", "session_token",
			"session_token needs access_key and secret_key too");
	} else if (cfg->creds_source == CREDS_CONFIG && !cfg->access_key) {
		fail_at(p, p->credentials_line, "s3", "credentials",
			"credentials = config requires access_key and secret_key in [s3]");
	}
}

/* Keys checked against each other; a section with an error of its own is
 * left out, so one mistake is reported once. */
static void check_whole(struct parser *p)
{
	struct rc_config *cfg = p->cfg;
	p->sec = SEC_NONE; /* errors below belong to no open section */
	if (!p->daemon_failed && cfg->memory_bytes < cfg->block_bytes)
		fail_at(p, p->memory_line ? p->memory_line : p->block_line,
			"daemon", p->memory_line ? "memory" : "block_size",
			"memory (%llu bytes) must hold at least one block (%u bytes)",
			(unsigned long long)cfg->memory_bytes, cfg->block_bytes);
	if (!p->daemon_failed && !cfg->tier_path != !cfg->tier_bytes)
		fail_at(p, p->tier_line, "daemon",
			cfg->tier_path ? "tier_path" : "tier_size",
			"tier_path and tier_size go together");
	if (!p->s3_failed)
		check_credentials(p);
	check_datasets(p);
	/* AWS wants virtual-hosted requests; most other stores path-style. */
	if (!p->addressing_line)
		cfg->addressing = cfg->endpoint ? S3_PATH_STYLE :
						  S3_VIRTUAL_HOSTED;
}

static void warn_risky_choices(const struct rc_config *cfg, const struct stat *st)
{
	if (!cfg->tls_verify)
		log_warn("%s: tls_verify = false: S3 server certificates are not checked",
			 cfg->path);
	if ((cfg->secret_key || cfg->session_token) && (st->st_mode & S_IROTH))
		log_warn("%s: holds secret_key but is readable by every user (chmod 600 it)",
			 cfg->path);
}

/* ---- public ------------------------------------------------------------ */

static void set_defaults(struct rc_config *cfg)
{
	cfg->socket_mode = 0660;
	cfg->memory_bytes = 1ull << 30;
	cfg->block_bytes = 1u << 20;
	cfg->log_level = RC_LOG_INFO;
	cfg->mlock = false;
	cfg->hugepages = true;
	cfg->metadata_ttl_s = 60;
	cfg->open_fetches_block = false;
	cfg->max_sessions = 256;
	cfg->root_reserved_sessions = 4;
	cfg->max_sessions_per_uid = 128;
	cfg->max_plan_entries = 1u << 20;
	cfg->max_plan_entries_per_uid = 4u << 20;
	cfg->max_handles = 1u << 20;
	cfg->max_registered = 1ull << 30;
	cfg->max_handles_per_uid = 4u << 20;
	cfg->max_leases_per_uid = 4u << 20;
	cfg->max_registered_per_uid = 4ull << 30;
	cfg->prefetch_window_bytes = 256ull << 20;
	cfg->prefetch_window_entries = 256;
	cfg->prefetch_inflight = 32;
	cfg->journal_bytes = 8ull << 30;
	cfg->staging_bytes = 1ull << 30;
	cfg->addressing = S3_PATH_STYLE;
	cfg->tls_verify = true;
	cfg->max_connections = 64;
	cfg->max_retries = RC_MAX_RETRIES_UNSET;
	cfg->retry_budget_s = 60;
	cfg->connect_timeout_ms = 3000;
	cfg->request_timeout_ms = 30000;
	cfg->creds_source = CREDS_AUTO;
}

static int parse_file(struct parser *p)
{
	struct rc_config *cfg = p->cfg;
	struct stat st;
	if (fstat(fileno(p->fp), &st) != 0) {
		snprintf(p->err, p->errlen, "%s: cannot stat: %s", cfg->path,
			 strerror(errno));
		return -1;
	}
	if (S_ISDIR(st.st_mode)) {
		snprintf(p->err, p->errlen, "%s: is a directory, not a config file",
			 cfg->path);
		return -1;
	}
	int rc = ini_read(p->fp, &config_reader, p);
	if (rc == -EIO) {
		snprintf(p->err, p->errlen, "%s: read error after line %d",
			 cfg->path, p->line);
		return -1;
	}
	if (rc < 0) {
		snprintf(p->err, p->errlen, "%s: out of memory", cfg->path);
		return -1;
	}
	p->line = rc;
	check_whole(p);
	if (p->failed) {
		unsigned shown = errors_shown(p);
		if (p->n_errors > shown)
			snprintf(p->err + p->err_used, p->errlen - p->err_used,
				 "%s%s: and %u more error(s)",
				 p->err_used ? "\n" : "", cfg->path,
				 p->n_errors - shown);
		return -1;
	}
	warn_risky_choices(cfg, &st);
	return 0;
}

int config_load(const char *path, struct rc_config *cfg, char *err,
		size_t errlen)
{
	char dummy[1];
	if (!err || errlen == 0) {
		err = dummy;
		errlen = sizeof(dummy);
	}
	err[0] = '\0';
	if (!path || !cfg) {
		snprintf(err, errlen, "config_load: no path or config given");
		return -1;
	}
	memset(cfg, 0, sizeof(*cfg));
	set_defaults(cfg);
	cfg->path = strdup(path);
	cfg->socket_path = strdup(DEFAULT_SOCKET);
	cfg->region = strdup(DEFAULT_REGION);
	if (!cfg->path || !cfg->socket_path || !cfg->region) {
		snprintf(err, errlen, "%s: out of memory", path);
		config_free(cfg);
		return -1;
	}
	struct parser p = {.cfg = cfg, .err = err, .errlen = errlen,
			   .label = ""};
	p.fp = fopen(path, "re");
	if (!p.fp) {
		snprintf(err, errlen, "%s: cannot open config file: %s", path,
			 strerror(errno));
		config_free(cfg);
		return -1;
	}
	int rc = parse_file(&p);
	fclose(p.fp);
	free(p.ds_failed);
	if (rc < 0)
		config_free(cfg);
	return rc;
}

static struct rc_config_value *find_value(const struct rc_config *cfg,
					   const char *section, const char *key)
{
	for (size_t i = 0; i < cfg->n_values; i++)
		if (strcmp(cfg->values[i].section, section) == 0 &&
		    strcmp(cfg->values[i].key, key) == 0)
			return &cfg->values[i];
	return NULL;
}

static void report_if_changed(const struct rc_config *old,
			      const struct rc_config *new, const char *section,
			      const char *key, config_change_fn *fn, void *ctx)
{
	const struct rc_config_value *a = find_value(old, section, key);
	const struct rc_config_value *b = find_value(new, section, key);
	const char *va = a ? a->value : NULL, *vb = b ? b->value : NULL;
	if (va == vb || (va && vb && strcmp(va, vb) == 0))
		return;
	fn(ctx, section, key, va, vb);
}

void config_changes(const struct rc_config *old, const struct rc_config *new,
		    config_change_fn *fn, void *ctx)
{
	for (size_t i = 0; i < old->n_values; i++)
		report_if_changed(old, new, old->values[i].section,
				  old->values[i].key, fn, ctx);
	for (size_t i = 0; i < new->n_values; i++)
		if (!find_value(old, new->values[i].section, new->values[i].key))
			report_if_changed(old, new, new->values[i].section,
					  new->values[i].key, fn, ctx);
}

int config_adopt_value(struct rc_config *running, const struct rc_config *from,
		       const char *section, const char *key)
{
	const struct rc_config_value *src = find_value(from, section, key);
	struct rc_config_value *dst = find_value(running, section, key);
	if (!src && !dst)
		return 0;
	if (!src) { /* back to the default: drop the record */
		free(dst->key);
		free(dst->value);
		*dst = running->values[--running->n_values];
		return 0;
	}
	char *value = strdup(src->value);
	if (!value)
		return -ENOMEM;
	if (dst) {
		free(dst->value);
		dst->value = value;
		return 0;
	}
	char *k = strdup(key);
	if (!k || RC_GROW(running->values, running->values_cap,
			  running->n_values + 1)) {
		free(value);
		free(k);
		return -ENOMEM;
	}
	running->values[running->n_values++] = (struct rc_config_value){
		src->section, k, value};
	return 0;
}

void config_dataset_clear(struct rc_dataset_config *ds)
{
	free(ds->name);
	free(ds->uri);
	free(ds->bucket);
	free(ds->prefix);
	free(ds->uids);
	free(ds->gids);
	free(ds->write_uids);
	free(ds->write_gids);
	memset(ds, 0, sizeof(*ds));
}

struct rc_dataset_config *config_dataset_dup(const struct rc_dataset_config *s)
{
	struct rc_dataset_config *c = calloc(1, sizeof(*c));
	if (!c)
		return NULL;
	*c = *s;
	c->name = strdup(s->name);
	c->uri = strdup(s->uri);
	c->bucket = strdup(s->bucket);
	c->prefix = strdup(s->prefix);
	c->uids = s->n_uids ? malloc(s->n_uids * sizeof(uid_t)) : NULL;
	c->gids = s->n_gids ? malloc(s->n_gids * sizeof(gid_t)) : NULL;
	c->write_uids = s->n_write_uids ?
		malloc(s->n_write_uids * sizeof(uid_t)) : NULL;
	c->write_gids = s->n_write_gids ?
		malloc(s->n_write_gids * sizeof(gid_t)) : NULL;
	if (!c->name || !c->uri || !c->bucket || !c->prefix ||
	    (s->n_uids && !c->uids) || (s->n_gids && !c->gids) ||
	    (s->n_write_uids && !c->write_uids) ||
	    (s->n_write_gids && !c->write_gids)) {
		config_dataset_clear(c);
		free(c);
		return NULL;
	}
	if (s->n_uids)
		memcpy(c->uids, s->uids, s->n_uids * sizeof(uid_t));
	if (s->n_gids)
		memcpy(c->gids, s->gids, s->n_gids * sizeof(gid_t));
	if (s->n_write_uids)
		memcpy(c->write_uids, s->write_uids,
		       s->n_write_uids * sizeof(uid_t));
	if (s->n_write_gids)
		memcpy(c->write_gids, s->write_gids,
		       s->n_write_gids * sizeof(gid_t));
	return c;
}

void config_free(struct rc_config *cfg)
{
	if (!cfg)
		return;
	for (size_t i = 0; i < cfg->n_datasets; i++)
		config_dataset_clear(&cfg->datasets[i]);
	free(cfg->datasets);
	for (size_t i = 0; i < cfg->n_values; i++) {
		if (config_key_is_secret(cfg->values[i].key))
			explicit_bzero(cfg->values[i].value,
				       strlen(cfg->values[i].value));
		free(cfg->values[i].key);
		free(cfg->values[i].value);
	}
	free(cfg->values);
	free(cfg->path);
	free(cfg->socket_path);
	free(cfg->endpoint);
	free(cfg->region);
	free(cfg->ca_file);
	free(cfg->tier_path);
	free(cfg->topology_file);
	free(cfg->journal_path);
	if (cfg->secret_key)
		explicit_bzero(cfg->secret_key, strlen(cfg->secret_key));
	if (cfg->session_token)
		explicit_bzero(cfg->session_token, strlen(cfg->session_token));
	free(cfg->access_key);
	free(cfg->secret_key);
	free(cfg->session_token);
	free(cfg->profile);
	free(cfg->credentials_file);
	memset(cfg, 0, sizeof(*cfg));
}

static bool ids_allow(const uid_t *uids, size_t n_uids, const gid_t *gids,
		      size_t n_gids, uid_t uid, gid_t gid, const gid_t *groups,
		      int ngroups)
{
	for (size_t i = 0; i < n_uids; i++)
		if (uids[i] == uid)
			return true;
	for (size_t i = 0; i < n_gids; i++) {
		if (gids[i] == gid)
			return true;
		for (int g = 0; groups && g < ngroups; g++)
			if (gids[i] == groups[g])
				return true;
	}
	return false;
}

bool config_dataset_allows_write(const struct rc_dataset_config *ds, uid_t uid,
				 gid_t gid, const gid_t *groups, int ngroups)
{
	if (!ds || !ds->writable)
		return false;
	if (uid == 0 || ds->write_all)
		return true;
	if (ds->n_write_uids == 0 && ds->n_write_gids == 0)
		return uid == geteuid(); /* secure default, as for reads */
	return ids_allow(ds->write_uids, ds->n_write_uids, ds->write_gids,
			 ds->n_write_gids, uid, gid, groups, ngroups);
}

bool config_dataset_allows(const struct rc_dataset_config *ds, uid_t uid,
			   gid_t gid, const gid_t *groups, int ngroups)
{
	if (uid == 0)
		return true;
	if (!ds)
		return false;
	if (ds->allow_all)
		return true;
	return ids_allow(ds->uids, ds->n_uids, ds->gids, ds->n_gids, uid, gid,
			 groups, ngroups);
}
