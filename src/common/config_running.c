/* config_running.c - owns a config once loaded: the [daemon] and [s3]
 * values as written, which a reload compares (config_changes) and adopts
 * one by one (config_adopt_value) and start-up asks after (config_written:
 * a key written or left at its default); copies of a dataset's config for a
 * running dataset; and the release of it all, secrets wiped first. */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "vec.h"

static struct rc_config_value *find_value(const struct rc_config *cfg,
					   const char *section, const char *key)
{
	for (size_t i = 0; i < cfg->n_values; i++)
		if (strcmp(cfg->values[i].section, section) == 0 &&
		    strcmp(cfg->values[i].key, key) == 0)
			return &cfg->values[i];
	return NULL;
}

bool config_written(const struct rc_config *cfg, const char *section,
		    const char *key)
{
	return find_value(cfg, section, key) != NULL;
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
