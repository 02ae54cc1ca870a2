/* config_values.c - owns the readers of a config value: numbers, sizes
 * (config_parse_size), booleans, the S3 endpoint URL, s3:// URIs with
 * S3's bucket naming rules, and uid/gid lists (names looked up in the
 * user and group databases). Pure functions of the text: each says what
 * is wrong, the parser (config.c) says where. */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <grp.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "config_parser.h"
#include "vec.h"

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

int cfg_parse_u64(const char *s, int base, uint64_t *out)
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

int cfg_parse_bool(const char *s, bool *out)
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

const char *cfg_endpoint_problem(const char *url)
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
		if (cfg_parse_u64(port, 10, &n) < 0 || n == 0 || n > 65535)
			return "has a bad port";
	}
	return NULL;
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

const char *cfg_split_s3_uri(const char *uri, char **bucket, char **prefix)
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

/* One getgrnam_r (group) or getpwnam_r into buf: its error (ERANGE: buf
 * is too small), else 0 with *found and, if found, *id. */
static int id_by_name(const char *name, bool group, char *buf, size_t size,
		      uint32_t *id, bool *found)
{
	int rc;
	if (group) {
		struct group gr, *g = NULL;
		rc = getgrnam_r(name, &gr, buf, size, &g);
		if (rc == 0 && g)
			*id = gr.gr_gid;
		*found = g != NULL;
	} else {
		struct passwd pw, *u = NULL;
		rc = getpwnam_r(name, &pw, buf, size, &u);
		if (rc == 0 && u)
			*id = pw.pw_uid;
		*found = u != NULL;
	}
	return rc;
}

/* getpwnam_r/getgrnam_r with a growing buffer: 1 found, 0 not, -1 error. */
static int lookup_id(const char *name, bool group, uint32_t *id)
{
	char *buf = NULL;
	uint32_t size = 0;
	bool found = false;
	int rc;
	do {
		if (RC_GROW_FROM(buf, size, (uint64_t)size + 1, 1024)) {
			free(buf);
			return -1;
		}
		rc = id_by_name(name, group, buf, size, id, &found);
	} while (rc == ERANGE && size < (1u << 20));
	free(buf);
	return rc ? -1 : found;
}

int cfg_parse_id_list(const char *value, bool group, uint32_t **out,
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
			if (cfg_parse_u64(tok, 10, &num) < 0 || num >= UINT32_MAX) {
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
