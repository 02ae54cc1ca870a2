/* quota.h - what one uid and one session may hold, daemon-wide.
 *
 * Each client uid has one usage record shared by all its connections on
 * every shard: connections, attached sessions, leased bytes, bytes pinned
 * by its prefetch windows and plan entries. Records are created and freed
 * under one lock (at accept and at the end of a connection); the byte and
 * entry counts are atomics that a shard's thread charges and uncharges on
 * its hot path. A charge past a limit is refused and counted by reason,
 * so every refusal shows in STATS as ringcache_refused_total{reason}. */
#ifndef RC_QUOTA_H
#define RC_QUOTA_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

struct rc_config;

enum refusal {
	REFUSED_CONNECTIONS_PER_UID, /* accept: the uid holds too many */
	REFUSED_SESSIONS,            /* attach: max_sessions (or root's reserve) */
	REFUSED_SESSIONS_PER_UID,
	REFUSED_LEASED_PER_SESSION,
	REFUSED_LEASED_PER_UID,
	REFUSED_INFLIGHT_PER_SESSION,
	REFUSED_INFLIGHT_PER_UID,
	REFUSED_PINNED_PER_UID,      /* a window held back (not a client error) */
	REFUSED_PLAN_ENTRIES,
	REFUSED_PLAN_ENTRIES_PER_UID,
	REFUSED_HANDLES,
	REFUSED_HANDLES_PER_UID,
	REFUSED_LEASES_PER_UID,
	REFUSED_REGISTERED,
	REFUSED_REGISTERED_PER_UID,
	REFUSED_STAGED_PER_UID,
	REFUSED_ACCEPT_FDS,          /* accept failed: out of file descriptors */
	REFUSED__COUNT
};

/* The label each reason has in ringcache_refused_total. */
const char *refusal_name(enum refusal r);

struct uid_usage {
	uid_t uid;
	uint32_t connections;        /* under quota.lock */
	uint32_t sessions;           /* attached; under quota.lock */
	_Atomic uint64_t leased_bytes;
	_Atomic uint64_t inflight_bytes;
	_Atomic uint64_t pinned_bytes;
	_Atomic uint64_t plan_entries;
	/* Table slots its sessions' handle and lease tables hold (a table
	 * grows by doubling and keeps its size until the session ends: the
	 * slots are the memory), and bytes of buffers it registered (the
	 * daemon's mapping faults in whatever a copy touches). */
	_Atomic uint64_t handle_slots;
	_Atomic uint64_t lease_slots;
	_Atomic uint64_t registered_bytes;
	_Atomic uint64_t staged_bytes; /* staging of its uncommitted objects */
	struct uid_usage *next;
};

/* The effective limits: config values with the automatic ones resolved.
 * A reload publishes a new set whole; a set it replaced stays readable
 * (chained on `older`) until quota_destroy, since another shard may be
 * reading it. */
struct limit_values {
	uint32_t max_sessions, root_reserved, sessions_per_uid;
	uint32_t connections_per_uid;
	uint64_t leased_per_session, leased_per_uid, pinned_per_uid;
	uint64_t inflight_per_session, inflight_per_uid;
	uint64_t plan_entries, plan_entries_per_uid;
	uint32_t handles;
	uint64_t handles_per_uid, leases_per_uid;
	uint64_t registered, registered_per_uid;
	uint64_t staged_per_uid;
	const struct limit_values *older;
};

struct quota {
	pthread_mutex_t lock;
	struct uid_usage *uids;
	uint32_t sessions;           /* attached, all shards; under lock */
	const struct limit_values *_Atomic v; /* read with no lock */
	_Atomic uint64_t refused[REFUSED__COUNT];
};

/* 0 or -ENOMEM. */
int quota_init(struct quota *l, const struct rc_config *cfg);
/* The limits from cfg (start, and a reload: what a session or uid holds
 * already stays; a lowered limit refuses its next request). 0, or -ENOMEM
 * and the limits stay as they were. */
int quota_set_limits(struct quota *l, const struct rc_config *cfg);
void quota_destroy(struct quota *l);

void quota_refused(struct quota *l, enum refusal r);

/* A new connection from uid: its usage record, or NULL with *err set
 * (-EDQUOT: the uid holds connections_per_uid, -ENOMEM). */
struct uid_usage *quota_connect(struct quota *l, uid_t uid, int *err);
void quota_disconnect(struct quota *l, struct uid_usage *u);

/* ATTACH: 0, -EDQUOT (sessions_per_uid) or -EUSERS (max_sessions; for
 * other uids than root, max_sessions less root's reserve). */
int quota_session_begin(struct quota *l, struct uid_usage *u);
void quota_session_end(struct quota *l, struct uid_usage *u);

/* Adds n to *counter unless that passes max: 0, or -EDQUOT (counted as
 * reason r). quota_charge2 charges a session's count and its uid's
 * together, or neither. */
int quota_charge(struct quota *l, _Atomic uint64_t *counter, uint64_t n,
		  uint64_t max, enum refusal r);
int quota_charge2(struct quota *l, uint64_t *session, uint64_t session_max,
		  enum refusal session_r, _Atomic uint64_t *uid,
		  uint64_t uid_max, enum refusal uid_r, uint64_t n);
void quota_uncharge(_Atomic uint64_t *counter, uint64_t n);
/* Adds between least and want to *counter, as much as max leaves room
 * for: the amount added, or 0 (counted as reason r) when not even least
 * fits. For tables that grow by doubling: the last growth takes what is
 * left. */
uint64_t quota_charge_upto(struct quota *l, _Atomic uint64_t *counter,
			   uint64_t least, uint64_t want, uint64_t max,
			   enum refusal r);

#endif
