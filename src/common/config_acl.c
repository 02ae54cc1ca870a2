/* config_acl.c - owns the dataset access rule: who may read a dataset
 * (allow_uids/allow_gids, root always, the daemon's own user by
 * default), who may write it (writable, write_uids/write_gids), and
 * whether two datasets' rules are the same (the overlap check, a
 * reload). */
#include "config.h"

#include <stdbool.h>
#include <stddef.h>
#include <unistd.h>

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
