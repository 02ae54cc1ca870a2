/* config.c - owns the reading of the daemon's configuration file
 * (inifile.h): its sections, every key of [daemon], [s3] and [dataset
 * NAME] with its handler and bounds (the key tables), the defaults, the
 * record of values a reload compares, and the error lines. The value
 * readers are config_values.c's, the checks of keys against each other
 * config_check.c's; what a loaded config is used for is config_acl.c's
 * and config_running.c's.
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
#include <limits.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "config_parser.h"
#include "inifile.h"
#include "log.h"
#include "vec.h"

#define DEFAULT_SOCKET "/run/ringcache/ringcache.sock"
#define DEFAULT_REGION "us-east-1"
#define DATASET_NAME_MAX 63
#define SUN_PATH_MAX (sizeof(((struct sockaddr_un *)0)->sun_path) - 1)
#define MAX_ERRORS 50
#define CONFIG_MAX_LINE 200 /* characters, blanks at either end aside */

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

int cfg_fail_at(struct parser *p, int line, const char *label,
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

/* ---- values ------------------------------------------------------------ */

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
	if (cfg_parse_u64(value, 8, &mode) < 0 || mode > 0777)
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
	    cfg_parse_u64(port, 10, &n) < 0 || n < 1 || n > 65535)
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

static int key_nice(struct parser *p, const char *key, const char *value)
{
	bool neg = value[0] == '-';
	uint64_t n;
	if (cfg_parse_u64(value + neg, 10, &n) < 0 || n > (neg ? 20u : 19u))
		return fail_value(p, key, value,
				  "must be a whole number from -20 to 19");
	p->cfg->nice = neg ? -(int)n : (int)n;
	return 1;
}

/* ---- [s3] -------------------------------------------------------------- */

static int key_endpoint(struct parser *p, const char *key, const char *value)
{
	const char *why = cfg_endpoint_problem(value);
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

static int key_uri(struct parser *p, const char *key, const char *value)
{
	struct rc_dataset_config *ds = current_dataset(p);
	char *bucket, *prefix;
	const char *why = cfg_split_s3_uri(value, &bucket, &prefix);
	if (why)
		return fail_value(p, key, value, why);
	ds->bucket = bucket;
	ds->prefix = prefix;
	return set_string(p, key, &ds->uri, value);
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
	if (cfg_parse_id_list(value, groups, ids, n, why, sizeof(why)) < 0)
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
	if (cfg_parse_bool(value, &current_dataset(p)->writable) < 0)
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
	if (cfg_parse_bool(value, &overwrite) < 0)
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
	if (config_parse_size(value, &bytes) < 0)
		return fail_value(p, key, value, "must be a size like 512M or 8G");
	if (bytes < min) {
		char what[64];
		bool mib = min % (1u << 20) == 0;
		snprintf(what, sizeof(what), "must be at least %llu%s",
			 (unsigned long long)(mib ? min >> 20 : min),
			 mib ? "M" : " bytes");
		return fail_value(p, key, value, what);
	}
	*field = bytes;
	return 1;
}

static int key_tier_size(struct parser *p, const char *key,
			 const char *value)
{
	int r = key_size_field(p, key, value, 16u << 20, &p->cfg->tier_bytes);
	if (r == 1)
		p->tier_line = p->line;
	return r;
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

static int key_staging_warm(struct parser *p, const char *key,
			    const char *value)
{
	return key_size_field(p, key, value, 0, &p->cfg->staging_warm_bytes);
}

/* 0 (off) or at least one 2 MiB populate step. */
static int key_arena_prefault(struct parser *p, const char *key,
			      const char *value)
{
	uint64_t bytes;
	if (config_parse_size(value, &bytes) < 0 ||
	    (bytes > 0 && bytes < (2u << 20)))
		return fail_value(p, key, value,
				  "must be 0 (off) or a size of at least 2M");
	p->cfg->arena_prefault_bytes = bytes;
	return 1;
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
	FN("nice", key_nice),
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
	FN("staging_warm", key_staging_warm),
	FN("arena_prefault", key_arena_prefault),
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
		if (cfg_parse_u64(value, 10, &n) < 0 || n < k->min || n > k->max) {
			snprintf(what, sizeof(what),
				 "must be a whole number from %u to %u",
				 k->min, k->max);
			return fail_value(p, k->name, value, what);
		}
		*(uint32_t *)(void *)field = (uint32_t)n;
		return 1;
	case K_BOOL:
		if (cfg_parse_bool(value, (bool *)field) < 0)
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
		return cfg_fail_at(p, p->line, "", name,
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
	cfg_fail_at(p, line, fault == INI_FAULT_SYNTAX ? "" : p->label, NULL,
		"%s", what);
}

static const struct ini_reader config_reader = {
	.max_line = CONFIG_MAX_LINE,
	.section = on_section,
	.key = on_key,
	.error = on_error,
};

/* ---- public ------------------------------------------------------------ */

static void set_defaults(struct rc_config *cfg)
{
	cfg->socket_mode = 0660;
	cfg->memory_bytes = 1ull << 30;
	cfg->block_bytes = 1u << 20;
	cfg->log_level = RC_LOG_INFO;
	cfg->mlock = false;
	cfg->nice = -5;
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
	cfg->staging_warm_bytes = UINT64_MAX; /* all of staging_bytes */
	cfg->arena_prefault_bytes = 16u << 20;
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
	cfg_check_whole(p);
	if (p->failed) {
		unsigned shown = errors_shown(p);
		if (p->n_errors > shown)
			snprintf(p->err + p->err_used, p->errlen - p->err_used,
				 "%s%s: and %u more error(s)",
				 p->err_used ? "\n" : "", cfg->path,
				 p->n_errors - shown);
		return -1;
	}
	cfg_warn_risky_choices(cfg, &st);
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

