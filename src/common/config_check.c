/* config_check.c - owns the checks of a config file as a whole, once
 * every line is read: keys that go together ([daemon] memory and
 * block_size, tier_path and tier_size; [s3] credentials), every dataset's
 * required keys, its secure default ACL and its journal, overlapping
 * datasets whose ACLs differ, and the warnings a config that loads may
 * still deserve. Errors go through the parser's report (cfg_fail_at). */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config_parser.h"
#include "log.h"

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
			cfg_fail_at(p, b->line, label, "uri",
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
		cfg_fail_at(p, p->line > 0 ? p->line : 1, "dataset NAME", NULL,
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
			cfg_fail_at(p, ds->line, label, "uri",
				"missing required key (e.g. uri = s3://bucket/prefix/)");
			continue;
		}
		if (ds->writable && ds->durability == DURABILITY_LOCAL &&
		    !cfg->journal_path && !p->daemon_failed) {
			cfg_fail_at(p, ds->line, label, "durability",
				"durability = local needs journal = PATH in [daemon] (or durability = memory | s3)");
			continue;
		}
		/* Secure default: nobody but the daemon's user (and root). */
		if (!ds->allow_all && ds->n_uids == 0 && ds->n_gids == 0) {
			ds->uids = malloc(sizeof(*ds->uids));
			if (!ds->uids) {
				cfg_fail_at(p, ds->line, label, NULL, "out of memory");
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
		cfg_fail_at(p, p->access_key_line, "s3", "access_key",
			"access_key is set but secret_key is missing: set both access_key and secret_key");
	} else if (cfg->secret_key && !cfg->access_key) {
		cfg_fail_at(p, p->secret_key_line, "s3", "secret_key",
			"secret_key is set but access_key is missing: set both access_key and secret_key");
	} else if (cfg->session_token && !cfg->access_key) {
		cfg_fail_at(p, p->session_token_line, "s3", "session_token",
			"session_token needs access_key and secret_key too");
	} else if (cfg->creds_source == CREDS_CONFIG && !cfg->access_key) {
		cfg_fail_at(p, p->credentials_line, "s3", "credentials",
			"credentials = config requires access_key and secret_key in [s3]");
	}
}

void cfg_check_whole(struct parser *p)
{
	struct rc_config *cfg = p->cfg;
	p->sec = SEC_NONE; /* errors below belong to no open section */
	if (!p->daemon_failed && cfg->memory_bytes < cfg->block_bytes)
		cfg_fail_at(p, p->memory_line ? p->memory_line : p->block_line,
			"daemon", p->memory_line ? "memory" : "block_size",
			"memory (%llu bytes) must hold at least one block (%u bytes)",
			(unsigned long long)cfg->memory_bytes, cfg->block_bytes);
	if (!p->daemon_failed && !cfg->tier_path != !cfg->tier_bytes)
		cfg_fail_at(p, p->tier_line, "daemon",
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

void cfg_warn_risky_choices(const struct rc_config *cfg,
			    const struct stat *st)
{
	if (!cfg->tls_verify)
		log_warn("%s: tls_verify = false: S3 server certificates are not checked",
			 cfg->path);
	if ((cfg->secret_key || cfg->session_token) && (st->st_mode & S_IROTH))
		log_warn("%s: holds secret_key but is readable by every user (chmod 600 it)",
			 cfg->path);
}
