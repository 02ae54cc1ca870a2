/* config_parser.h - what the files of the config parser share, private to
 * them (config.c, config_values.c, config_check.c): the parser's state,
 * its error line, the value readers and the whole-file checks.
 *
 * Ownership: config_load owns the parser for one file; every call here
 * runs on its thread, within that load. */
#ifndef RC_CONFIG_PARSER_H
#define RC_CONFIG_PARSER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/stat.h>

struct rc_config; /* config.h: the parser fills one, the users read it */

#define MAX_KEYS_PER_SECTION 64

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

/* One error line, "PATH:LINE: [label] key: what", added to the parser's
 * report (config.c). Returns 0 so that key handlers can `return
 * cfg_fail_at(...)`. */
__attribute__((format(printf, 5, 6)))
int cfg_fail_at(struct parser *p, int line, const char *label,
		const char *key, const char *fmt, ...);

/* ---- value readers (config_values.c): pure, no parser state ---------- */

/* Digits only (base 8 or 10), no sign, no blank: 0, or -1. */
int cfg_parse_u64(const char *s, int base, uint64_t *out);
/* true/yes/on/1, false/no/off/0 (any case): 0, or -1. */
int cfg_parse_bool(const char *s, bool *out);
/* Checks scheme://host[:port][/path]; NULL if fine, else why not. */
const char *cfg_endpoint_problem(const char *url);
/* Splits s3://bucket[/prefix] into owned bucket and prefix ("" or ending
 * in '/'); NULL if fine, else why not (nothing is allocated then). */
const char *cfg_split_s3_uri(const char *uri, char **bucket, char **prefix);
/* Parses "0, alice, 1001" into ids[]; numbers or names looked up in the
 * user (or group) database. On error writes why into `why`. */
int cfg_parse_id_list(const char *value, bool group, uint32_t **out,
		      size_t *n_out, char *why, size_t whylen);

/* ---- whole-file checks (config_check.c) ------------------------------- */

/* Keys checked against each other once the file is read; a section with
 * an error of its own is left out, so one mistake is reported once. Also
 * the datasets' secure default ACL and the addressing default. */
void cfg_check_whole(struct parser *p);
/* Warnings, not errors, for a config that loaded (st: the file's). */
void cfg_warn_risky_choices(const struct rc_config *cfg,
			    const struct stat *st);

#endif
