/* quota.c - owns the per-uid usage records, the effective limits and the
 * refusal counters (see quota.h). */
#include "quota.h"

#include <errno.h>
#include <stdlib.h>

#include "config.h"

static const char *const refusal_names[REFUSED__COUNT] = {
	[REFUSED_CONNECTIONS_PER_UID] = "connections_per_uid",
	[REFUSED_SESSIONS] = "sessions",
	[REFUSED_SESSIONS_PER_UID] = "sessions_per_uid",
	[REFUSED_LEASED_PER_SESSION] = "leased_per_session",
	[REFUSED_LEASED_PER_UID] = "leased_per_uid",
	[REFUSED_INFLIGHT_PER_SESSION] = "inflight_per_session",
	[REFUSED_INFLIGHT_PER_UID] = "inflight_per_uid",
	[REFUSED_PINNED_PER_UID] = "pinned_per_uid",
	[REFUSED_PLAN_ENTRIES] = "plan_entries",
	[REFUSED_PLAN_ENTRIES_PER_UID] = "plan_entries_per_uid",
	[REFUSED_HANDLES] = "handles",
	[REFUSED_HANDLES_PER_UID] = "handles_per_uid",
	[REFUSED_LEASES_PER_UID] = "leases_per_uid",
	[REFUSED_REGISTERED] = "registered",
	[REFUSED_REGISTERED_PER_UID] = "registered_per_uid",
	[REFUSED_STAGED_PER_UID] = "staged_per_uid",
	[REFUSED_ACCEPT_FDS] = "accept_fds",
};

const char *refusal_name(enum refusal r)
{
	return r < REFUSED__COUNT ? refusal_names[r] : "unknown";
}

static uint64_t or_default(uint64_t v, uint64_t dflt)
{
	return v ? v : dflt;
}

int quota_init(struct quota *l, const struct rc_config *cfg)
{
	pthread_mutex_init(&l->lock, NULL);
	l->uids = NULL;
	l->sessions = 0;
	atomic_init(&l->v, NULL);
	for (unsigned i = 0; i < REFUSED__COUNT; i++)
		atomic_init(&l->refused[i], 0);
	return quota_set_limits(l, cfg);
}

int quota_set_limits(struct quota *l, const struct rc_config *cfg)
{
	struct limit_values v = {.older = l->v};
	v.max_sessions = cfg->max_sessions;
	/* The reserve leaves at least one slot to everyone else. */
	v.root_reserved = cfg->root_reserved_sessions < cfg->max_sessions
				  ? cfg->root_reserved_sessions
				  : cfg->max_sessions - 1;
	v.sessions_per_uid = cfg->max_sessions_per_uid;
	if (v.sessions_per_uid > v.max_sessions - v.root_reserved)
		v.sessions_per_uid = v.max_sessions - v.root_reserved;
	/* Room for STATS and reconnects beside the sessions, no more: a
	 * connection costs the daemon a file descriptor. */
	v.connections_per_uid = 2 * v.sessions_per_uid + 16;
	v.leased_per_session = or_default(cfg->max_leased_per_session,
					  cfg->memory_bytes / 4);
	v.leased_per_uid = or_default(cfg->max_leased_per_uid,
				      cfg->memory_bytes / 2);
	v.inflight_per_session = or_default(cfg->max_inflight_per_session,
					    cfg->memory_bytes / 4);
	v.inflight_per_uid = or_default(cfg->max_inflight_per_uid,
					cfg->memory_bytes / 2);
	v.pinned_per_uid = or_default(cfg->max_pinned_per_uid,
				      cfg->memory_bytes / 4);
	v.plan_entries = cfg->max_plan_entries;
	v.plan_entries_per_uid = cfg->max_plan_entries_per_uid;
	v.handles = cfg->max_handles;
	v.registered = cfg->max_registered;
	v.handles_per_uid = cfg->max_handles_per_uid;
	v.leases_per_uid = cfg->max_leases_per_uid;
	v.registered_per_uid = cfg->max_registered_per_uid;
	v.staged_per_uid = or_default(cfg->max_staged_per_uid,
				      cfg->staging_bytes / 2);
	struct limit_values *set = malloc(sizeof(*set));
	if (!set)
		return -ENOMEM;
	*set = v;
	l->v = set;
	return 0;
}

void quota_destroy(struct quota *l)
{
	while (l->uids) {
		struct uid_usage *n = l->uids->next;
		free(l->uids);
		l->uids = n;
	}
	for (const struct limit_values *v = l->v, *older; v; v = older) {
		older = v->older;
		free((void *)v);
	}
	pthread_mutex_destroy(&l->lock);
}

void quota_refused(struct quota *l, enum refusal r)
{
	atomic_fetch_add_explicit(&l->refused[r], 1, memory_order_relaxed);
}

struct uid_usage *quota_connect(struct quota *l, uid_t uid, int *err)
{
	*err = 0;
	pthread_mutex_lock(&l->lock);
	struct uid_usage *u = l->uids;
	while (u && u->uid != uid)
		u = u->next;
	if (!u && (u = calloc(1, sizeof(*u)))) {
		u->uid = uid;
		u->next = l->uids;
		l->uids = u;
	}
	if (!u)
		*err = -ENOMEM;
	else if (u->connections >= l->v->connections_per_uid)
		*err = -EDQUOT;
	else
		u->connections++;
	pthread_mutex_unlock(&l->lock);
	if (*err == -EDQUOT)
		quota_refused(l, REFUSED_CONNECTIONS_PER_UID);
	return *err ? NULL : u;
}

void quota_disconnect(struct quota *l, struct uid_usage *u)
{
	if (!u)
		return;
	pthread_mutex_lock(&l->lock);
	if (--u->connections == 0) {
		struct uid_usage **pp = &l->uids;
		while (*pp != u)
			pp = &(*pp)->next;
		*pp = u->next;
		free(u);
	}
	pthread_mutex_unlock(&l->lock);
}

int quota_session_begin(struct quota *l, struct uid_usage *u)
{
	int err = 0;
	const struct limit_values *v = l->v; /* one set for the decision */
	pthread_mutex_lock(&l->lock);
	uint32_t room = u->uid == 0 ? v->max_sessions
				    : v->max_sessions - v->root_reserved;
	if (u->sessions >= v->sessions_per_uid)
		err = -EDQUOT; /* its own limit first: the more telling */
	else if (l->sessions >= room)
		err = -EUSERS;
	else {
		l->sessions++;
		u->sessions++;
	}
	pthread_mutex_unlock(&l->lock);
	if (err)
		quota_refused(l, err == -EUSERS ? REFUSED_SESSIONS
						 : REFUSED_SESSIONS_PER_UID);
	return err;
}

void quota_session_end(struct quota *l, struct uid_usage *u)
{
	pthread_mutex_lock(&l->lock);
	l->sessions--;
	u->sessions--;
	pthread_mutex_unlock(&l->lock);
}

int quota_charge(struct quota *l, _Atomic uint64_t *counter, uint64_t n,
		  uint64_t max, enum refusal r)
{
	uint64_t cur = atomic_load_explicit(counter, memory_order_relaxed);
	do {
		if (n > max || cur > max - n) {
			quota_refused(l, r);
			return -EDQUOT;
		}
	} while (!atomic_compare_exchange_weak_explicit(
		counter, &cur, cur + n, memory_order_relaxed,
		memory_order_relaxed));
	return 0;
}

int quota_charge2(struct quota *l, uint64_t *session, uint64_t session_max,
		  enum refusal session_r, _Atomic uint64_t *uid,
		  uint64_t uid_max, enum refusal uid_r, uint64_t n)
{
	if (n > session_max || *session > session_max - n) {
		quota_refused(l, session_r);
		return -EDQUOT;
	}
	int err = quota_charge(l, uid, n, uid_max, uid_r);
	if (err == 0)
		*session += n;
	return err;
}

void quota_uncharge(_Atomic uint64_t *counter, uint64_t n)
{
	atomic_fetch_sub_explicit(counter, n, memory_order_relaxed);
}

uint64_t quota_charge_upto(struct quota *l, _Atomic uint64_t *counter,
			   uint64_t least, uint64_t want, uint64_t max,
			   enum refusal r)
{
	uint64_t cur = atomic_load_explicit(counter, memory_order_relaxed);
	uint64_t n;
	do {
		uint64_t room = cur < max ? max - cur : 0;
		if (room < least || least == 0) {
			quota_refused(l, r);
			return 0;
		}
		n = want < room ? want : room;
	} while (!atomic_compare_exchange_weak_explicit(
		counter, &cur, cur + n, memory_order_relaxed,
		memory_order_relaxed));
	return n;
}
