/* mount.c - `ringcache mount DATASET DIR`: one dataset as a POSIX file
 * system (libfuse3, low-level API), built only on the public client
 * library. It keeps no data cache of its own: names come from LIST,
 * attributes from OPEN, and every read is a zero-copy READ whose leased
 * arena extents go to the kernel as the reply's iovec, released once the
 * reply is written. The kernel's page cache keeps a file's pages across
 * opens of the same ETag (keep_cache) and for the daemon's metadata_ttl.
 * On a writable dataset create + writes + close map to WRITE_OPEN / WRITE /
 * COMMIT, rename to RENAME and fsync to SYNC.
 *
 * Many requests in flight: libfuse's multi-threaded loop, and a pool of
 * rc_clients (rc_client is not thread-safe) that a worker takes for one
 * daemon call and gives back. Reads hold no handle: each is a READ_KEY
 * of the open's key, checked against the ETag the open saw, so an open
 * that is never read pins nothing and any pooled client can serve any
 * read. Writes and namespace changes keep one client and one lock
 * (m->lock): a write handle belongs to the session that opened it.
 *
 * No opens on a read-only dataset (FUSE_CAP_NO_OPEN_SUPPORT): the first
 * OPEN is answered ENOSYS, after which the kernel opens and closes files
 * by itself (no OPEN, FLUSH or RELEASE) and keeps their pages. A node's
 * etag is then the version its cached pages hold: reads are checked
 * against it, and an answer that shows another version drops the pages
 * (fuse_lowlevel_notify_inval_inode) before any of the new one is read.
 *
 * Fetch-ahead: a reader that walks a directory in listing order (ahead.c
 * tells) gets its next files fetched into the daemon's cache by fetcher
 * threads of their own sessions (READ_KEYs of each file's first byte);
 * a directory read cold in no order is swept whole, and a file read in
 * order (fileahead.c tells) is fetched past its READs in pieces of many
 * blocks, all within one budget.
 *
 * The POSIX subset and its errors are in docs/MOUNT.md. */
#define FUSE_USE_VERSION 312 /* fuse_loop_cfg_set_max_threads */
#include <fuse_lowlevel.h>

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "ahead.h"
#include "fileahead.h"
#include "clock.h"
#include "mount.h"
#include "ringcache.h"
#include "vec.h"

#define LIST_BUF (1u << 20)
#define IO_BUF (1u << 20)      /* registered buffer WRITE copies from */
#define MAX_READ 1048576       /* FUSE's largest read (max_read=) */
#define RC_STR_(x) #x
#define RC_STR(x) RC_STR_(x)
#define MAX_EXT 64             /* extents of one read: >= MAX_READ / 64K + 1 */
#define NODE_BUCKETS 16384u
#define MAX_KEPT_FILES 1024u   /* written files kept for rename/stat */
#define FUSE_WORKERS 32        /* libfuse's worker threads, at most */
#define POOL_MAX (FUSE_WORKERS + 2) /* clients: a worker's each, and spare */
#define TTL_METRIC "ringcache_metadata_ttl_seconds"
#define READAHEAD_KB 8192      /* the mount's bdi read_ahead_kb, as root */
#define MAX_BACKGROUND 64      /* READs the kernel keeps in flight */
#define NAME_MAX_POSIX 255
#define UNKNOWN_INO 0xffffffffu /* readdir: libc hides d_ino 0 */
/* Fetching ahead of readers by path (ahead.c says when and what). */
#define FA_THREADS 8           /* each a session with FA_BATCH GETs in flight */
#define FA_BATCH 4
#define FA_QUEUE 256           /* files waiting to be fetched, all walks */
#define FA_LISTS 16            /* directories whose listing is kept */
#define FA_LIST_MAX 262144u    /* larger directories: no fetch-ahead */
#define FA_LIST_MIN_S 30.0     /* a listing lives max(metadata_ttl, this) */
#define FA_SWEEP_AFTER 8       /* distinct cold files read before a sweep */
#define FA_SWEEP_FILE_MAX (4u << 20) /* larger files: not swept */
#define FA_SWEEP_EXT 16        /* extents of one swept file's READ_KEY */
#define FA_BUDGET_METRIC "ringcache_arena_capacity_bytes"
#define FA_BUDGET_DIV 4        /* default budget: this part of the cache */

/* A name the kernel has looked up: its relative key ("" is the root). */
struct node {
	fuse_ino_t ino;
	uint64_t nlookup;
	char *key;
	struct node *next_ino, *next_key;
	uint64_t size; /* the size last told to the kernel */
	uint64_t listed_ns; /* a directory: when a lookup last LISTed it */
	uint64_t etag_ns;   /* when the daemon last gave etag */
	/* The version whose bytes the kernel may hold in its page cache
	 * ("": none yet): an open that finds the same ETag keeps them. */
	char etag[RC_MAX_ETAG];
	/* no_open: etag changed and the old pages are being dropped; reads
	 * fail ESTALE meanwhile, so no read mixes the two versions. */
	bool inval_pending;
};

/* W_DROPPED: unlinked while open: aborted, later writes are discarded
 * as POSIX lets an unlinked file be written. */
enum wstate { W_OPEN, W_SEALED, W_FAILED, W_DROPPED };

/* A file written through this mount. Kept after close so rename can
 * RENAME it and stat can see it before LIST does. */
struct wfile {
	char *key;          /* NULL once unlinked or replaced */
	uint32_t handle;    /* the daemon's write handle */
	uint64_t size;
	enum wstate state;
	int err;            /* W_FAILED: why */
	unsigned opens;
	uid_t uid;          /* who created it (fuse_req_ctx): its fsyncs */
	struct wfile *next; /* newest first */
};

/* A directory made by mkdir: S3 has no directories, so it lives here
 * until something is written under it. */
struct ldir {
	char *key;
	struct ldir *next;
};

/* What fi->fh points at. A reader holds no daemon handle: its reads are
 * READ_KEYs of key, valid while the object keeps the ETag open saw. */
struct ofile {
	char *key;        /* read: the key it was opened with */
	pthread_mutex_t mu; /* etag: reads of one file run in parallel */
	char etag[RC_MAX_ETAG];
	uint64_t size; /* as open saw it: fetch-ahead stops there */
	struct wfile *w;
};

/* One pooled session: a worker holds it for one daemon call. */
struct pclient {
	struct rc_client c;
	int ds;
	uint32_t list_buf;
	void *list_mem;
	uint32_t reconnects_seen; /* rc_reconnects when old arenas went */
	bool attached;
	struct pclient *next;     /* free list */
};

struct dentry {
	char *name;
	uint64_t size; /* from LIST; 0 for a directory or a written file */
	bool dir;
};

struct dirlist {
	struct dentry *e;
	uint32_t n, cap;
};

/* What fetch-ahead knows of one file of a kept listing. */
enum fa_state {
	FA_NONE,    /* not read, not fetched */
	FA_FETCHED, /* fetched (or queued) for a walk, or swept and expired */
	FA_SWEPT,   /* fetched (or queued) by a sweep, not read yet: budget */
	FA_READ,    /* a reader read it from its start */
};

/* A directory's names in listing order (build_dirlist's, sorted as S3
 * lists them): the index a walk is followed by. id changes with every
 * listing, so a walk never mixes the indices of two. */
struct alisting {
	char *dir;          /* NULL: a free slot */
	struct dirlist *l;  /* NULL: not listed yet */
	uint8_t *st;        /* enum fa_state of each entry of l */
	uint64_t id, built_ns, used;
	uint64_t bytes;     /* the listed files' sizes, summed */
	uint64_t unread;    /* swept, not read yet: part of fa->unread */
	uint32_t cold;      /* files read from their start as FA_NONE */
	/* read from their start before the listing came: counted then */
	char *early[FA_SWEEP_AFTER];
	uint32_t n_early;
	uint32_t sweep_next; /* sweeping: the next entry to look at */
	bool sweeping;
	bool want, listing; /* to be listed (again); a fetcher lists it */
};

/* What to fetch: len bytes of key at off (a walk's: its first byte,
 * so its first block; a sweep's: the whole file; a stream's: a piece of
 * a file read in order, spanning at most FA_SWEEP_EXT blocks). */
struct fa_item {
	char *key;
	uint64_t off, len;
	bool piece; /* a stream's: counted apart from files */
};

/* Fetch-ahead: the detector, the listings it needs, the files it chose
 * (keys, oldest first) and the sessions that fetch them. */
struct fetcher {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct ahead ahead;
	struct alisting lists[FA_LISTS];
	struct fa_item queue[FA_QUEUE];
	unsigned q_head, q_len;
	/* The sweep's bound (-o ahead_bytes, else a part of the daemon's
	 * cache) and the swept bytes no reader has read yet, all listings. */
	uint64_t budget, unread;
	uint64_t next_id, tick;
	bool stop;
	unsigned n_threads;
	pthread_t threads[FA_THREADS];
	struct pclient pc[FA_THREADS];
	/* Files read in order, fetched ahead of their READs (fileahead.c),
	 * by ino; its bytes not read yet and fa->unread share the budget. */
	struct fileahead files;
	uint32_t block; /* the daemon's block_size when the mount began */
	/* for the exit line and the -d log: walks that fetched, files */
	uint64_t fired, queued, dropped, fetched, failed;
	uint64_t sweeps, swept; /* directories swept, files queued by them */
	uint64_t pieces, piece_bytes, pieces_failed; /* within files */
};

struct mnt {
	/* Nodes, written files, local directories and c (the session that
	 * writes): recursive, as write paths call stat_key. Never taken
	 * while holding a pooled client (the pool may be empty). */
	pthread_mutex_t lock;
	struct rc_client c;
	int ds;
	bool writable;
	const char *dataset;
	uint32_t list_buf, io_buf;
	void *list_mem, *io_mem;
	struct node *by_ino[NODE_BUCKETS], *by_key[NODE_BUCKETS];
	fuse_ino_t next_ino;
	struct wfile *wfiles;
	unsigned n_wfiles;
	struct ldir *ldirs;
	struct timespec mounted;
	const char *socket_path;
	struct fuse_session *se;
	double ttl; /* the daemon's metadata_ttl: how long the kernel trusts */
	/* read-only and the kernel opens files by itself: set by INIT */
	atomic_bool no_open;
	unsigned invals; /* inval_later threads running (under lock) */
	pthread_cond_t invals_done;
	pthread_mutex_t pool_lock;
	pthread_cond_t pool_cond;
	struct pclient *pool_free; /* attached, not in use */
	struct pclient *pool_idle; /* not attached (yet, or it failed) */
	unsigned pool_live;        /* attached */
	struct pclient pool[POOL_MAX];
	bool debug; /* -d: fetch-ahead says what it fetches, on stderr */
	bool ahead; /* fetch-ahead and the sweep (-o ahead_bytes=0: off) */
	struct fetcher fa;
};

/* ---- the pool of sessions ------------------------------------------------- */

static int pc_attach(struct mnt *m, struct pclient *p)
{
	struct rc_attach_opts o = {.gpu = -1, .numa_node = -1};
	int r = rc_attach(&p->c, m->socket_path, &o);
	if (r < 0)
		return r;
	p->ds = rc_dataset(&p->c, m->dataset);
	int lb = p->ds < 0 ? p->ds
			   : rc_alloc_buffer(&p->c, LIST_BUF, &p->list_mem);
	if (lb < 0) {
		rc_detach(&p->c);
		return lb;
	}
	p->list_buf = (uint32_t)lb;
	p->reconnects_seen = rc_reconnects(&p->c);
	p->attached = true;
	return 0;
}

/* Takes an idle client of the pool and attaches it (pool_lock held on
 * entry and return, dropped during the attach). NULL: none was idle
 * (*err 0), or its attach failed (*err; it goes back, tried again). */
static struct pclient *pc_attach_idle(struct mnt *m, int *err)
{
	struct pclient *p = m->pool_idle;
	*err = 0;
	if (!p)
		return NULL;
	m->pool_idle = p->next;
	pthread_mutex_unlock(&m->pool_lock);
	int r = pc_attach(m, p);
	pthread_mutex_lock(&m->pool_lock);
	if (r == 0) {
		m->pool_live++;
		return p;
	}
	p->next = m->pool_idle;
	m->pool_idle = p;
	*err = r;
	return NULL;
}

/* A session of the pool: an attached one that is free, else a slot
 * attached now (up to POOL_MAX), else the next one given back. NULL when
 * none is attached and none can be (the daemon is gone or refuses): the
 * call fails (EIO) and the next one tries again. */
static struct pclient *pc_get(struct mnt *m)
{
	pthread_mutex_lock(&m->pool_lock);
	for (;;) {
		struct pclient *p = m->pool_free;
		int r;
		if (p)
			m->pool_free = p->next;
		else
			p = pc_attach_idle(m, &r);
		if (p) {
			pthread_mutex_unlock(&m->pool_lock);
			return p;
		}
		if (r < 0 && !m->pool_live) {
			pthread_mutex_unlock(&m->pool_lock);
			fprintf(stderr, "ringcache mount: %s: no session: %s\n",
				m->dataset, rc_strerror(r));
			return NULL;
		}
		pthread_cond_wait(&m->pool_cond, &m->pool_lock);
	}
}

static void list_ahead(struct mnt *m, fuse_ino_t parent);

/* Attaches the pool's sessions once the mount is up, so that the first
 * reads do not each wait for an attach (tens of ms on a loaded host), and
 * lists the root as its first lookup would (list_ahead): a loader's first
 * open then waits for no LIST of the root. A failure leaves the rest to
 * pc_get and to that lookup, as before. */
static void *pool_warm(void *arg)
{
	struct mnt *m = arg;
	pthread_mutex_lock(&m->pool_lock);
	for (unsigned i = 0; i < POOL_MAX; i++) {
		int r;
		struct pclient *p = pc_attach_idle(m, &r);
		if (p) {
			p->next = m->pool_free;
			m->pool_free = p;
		}
		pthread_cond_broadcast(&m->pool_cond);
		if (!p)
			break;
	}
	bool up = m->pool_live > 0;
	pthread_mutex_unlock(&m->pool_lock);
	if (up)
		list_ahead(m, FUSE_ROOT_ID);
	return NULL;
}

static void pc_put(struct mnt *m, struct pclient *p)
{
	/* No lease outlives a call: after a daemon restart the old arenas
	 * (and their memory) can go. */
	if (rc_reconnects(&p->c) != p->reconnects_seen) {
		p->reconnects_seen = rc_reconnects(&p->c);
		rc_unmap_old_arenas(&p->c);
	}
	pthread_mutex_lock(&m->pool_lock);
	p->next = m->pool_free;
	m->pool_free = p;
	pthread_cond_signal(&m->pool_cond);
	pthread_mutex_unlock(&m->pool_lock);
}

/* ---- keys and nodes ------------------------------------------------------ */

static unsigned key_hash(const char *k)
{
	uint32_t h = 2166136261u;
	while (*k)
		h = (h ^ (uint8_t)*k++) * 16777619u;
	return h % NODE_BUCKETS;
}

static struct node *node_by_ino(struct mnt *m, fuse_ino_t ino)
{
	for (struct node *n = m->by_ino[ino % NODE_BUCKETS]; n; n = n->next_ino)
		if (n->ino == ino)
			return n;
	return NULL;
}

static struct node *node_by_key(struct mnt *m, const char *key)
{
	for (struct node *n = m->by_key[key_hash(key)]; n; n = n->next_key)
		if (strcmp(n->key, key) == 0)
			return n;
	return NULL;
}

static void unlink_key(struct mnt *m, struct node *n)
{
	struct node **p = &m->by_key[key_hash(n->key)];
	while (*p && *p != n)
		p = &(*p)->next_key;
	if (*p)
		*p = n->next_key;
	n->next_key = NULL;
}

/* The node for key (created on first use), or NULL without memory. */
static struct node *node_get(struct mnt *m, const char *key)
{
	struct node *n = node_by_key(m, key);
	if (n)
		return n;
	n = calloc(1, sizeof(*n));
	if (!n || !(n->key = strdup(key))) {
		free(n);
		return NULL;
	}
	n->ino = m->next_ino++;
	unsigned h = key_hash(key);
	n->next_key = m->by_key[h];
	m->by_key[h] = n;
	n->next_ino = m->by_ino[n->ino % NODE_BUCKETS];
	m->by_ino[n->ino % NODE_BUCKETS] = n;
	return n;
}

static void node_forget(struct mnt *m, struct node *n, uint64_t count)
{
	n->nlookup = count > n->nlookup ? 0 : n->nlookup - count;
	if (n->nlookup || n->ino == FUSE_ROOT_ID)
		return;
	unlink_key(m, n);
	struct node **p = &m->by_ino[n->ino % NODE_BUCKETS];
	while (*p != n)
		p = &(*p)->next_ino;
	*p = n->next_ino;
	free(n->key);
	free(n);
}

/* parent's key + "/" + name; -ENAMETOOLONG past S3's key limit. */
static int child_key(struct mnt *m, fuse_ino_t parent, const char *name,
		     char **out)
{
	struct node *p = node_by_ino(m, parent);
	if (!p)
		return -ESTALE;
	if (strlen(name) > NAME_MAX_POSIX)
		return -ENAMETOOLONG;
	int r = *p->key ? asprintf(out, "%s/%s", p->key, name)
			: asprintf(out, "%s", name);
	if (r < 0)
		return -ENOMEM;
	if ((size_t)r > RC_MAX_KEY) {
		free(*out);
		return -ENAMETOOLONG;
	}
	return 0;
}

/* True if key lies directly in directory dir ("" is the root). */
static bool in_dir(const char *key, const char *dir)
{
	size_t n = strlen(dir);
	if (n && (strncmp(key, dir, n) != 0 || key[n] != '/'))
		return false;
	return strchr(key + (n ? n + 1 : 0), '/') == NULL;
}

static bool under(const char *key, const char *dir)
{
	size_t n = strlen(dir);
	return !n || (strncmp(key, dir, n) == 0 && key[n] == '/');
}

/* ---- written files and local directories ------------------------------- */

static struct wfile *wfile_find(struct mnt *m, const char *key)
{
	for (struct wfile *w = m->wfiles; w; w = w->next)
		if (w->key && strcmp(w->key, key) == 0)
			return w;
	return NULL;
}

/* Forget a written file's name: it was replaced, renamed over or
 * unlinked. Its handle goes when nothing has it open. */
static void wfile_detach(struct wfile *w)
{
	free(w->key);
	w->key = NULL;
}

/* Drops detached, closed files and, past MAX_KEPT_FILES, the oldest sealed
 * ones (LIST shows those once uploaded). */
static void wfile_trim(struct mnt *m)
{
	unsigned kept = 0;
	for (struct wfile **p = &m->wfiles; *p;) {
		struct wfile *w = *p;
		bool keep = w->opens || (w->key && (w->state == W_OPEN ||
						    kept < MAX_KEPT_FILES));
		if (keep) {
			kept++;
			p = &w->next;
			continue;
		}
		*p = w->next;
		rc_close(&m->c, w->handle);
		free(w->key);
		free(w);
		m->n_wfiles--;
	}
}

static struct ldir *ldir_find(struct mnt *m, const char *key)
{
	for (struct ldir *d = m->ldirs; d; d = d->next)
		if (strcmp(d->key, key) == 0)
			return d;
	return NULL;
}

/* ---- attributes ---------------------------------------------------------- */

/* Errors the daemon gives that mean something else to a file system. */
static int fs_err(int err)
{
	switch (err) {
	case -EKEYREJECTED:
		return -EACCES; /* the daemon's S3 credentials, not the caller's */
	case -EPIPE:
		return -EIO; /* the daemon went away */
	default:
		return err;
	}
}

/* Does anything (in S3, written here, made here) lie under dir? */
static int has_children(struct mnt *m, const char *dir)
{
	int local = 0;
	pthread_mutex_lock(&m->lock);
	for (struct wfile *w = m->wfiles; w && !local; w = w->next)
		local = w->key && under(w->key, dir);
	for (struct ldir *d = m->ldirs; d && !local; d = d->next)
		local = under(d->key, dir);
	pthread_mutex_unlock(&m->lock);
	if (local)
		return 1;
	char *prefix;
	if (asprintf(&prefix, "%s/", dir) < 0)
		return -ENOMEM;
	struct pclient *p = pc_get(m);
	int more = 0;
	int n = p ? rc_list(&p->c, p->ds, prefix, 0, p->list_buf, 0, 4096,
			    &more)
		  : -EIO;
	if (p)
		pc_put(m, p);
	free(prefix);
	if (n < 0)
		return fs_err(n);
	return n > 0 || more;
}

static void fill_stat(struct mnt *m, struct stat *st, fuse_ino_t ino,
		      bool dir, uint64_t size)
{
	memset(st, 0, sizeof(*st));
	st->st_ino = ino;
	st->st_mode = dir ? S_IFDIR | (m->writable ? 0755 : 0555)
			  : S_IFREG | (m->writable ? 0644 : 0444);
	st->st_nlink = dir ? 2 : 1;
	st->st_uid = getuid();
	st->st_gid = getgid();
	st->st_size = (off_t)size;
	st->st_blksize = (blksize_t)m->c.block_size;
	st->st_blocks = (blkcnt_t)((size + 511) / 512);
	st->st_atim = st->st_mtim = st->st_ctim = m->mounted;
}

/* OPEN of key on a pooled session, closed at once (lazily: the CLOSE
 * goes with this session's next submission, pushed now). */
static int open_key(struct mnt *m, const char *key, struct rc_stat *rs)
{
	struct pclient *p = pc_get(m);
	if (!p)
		return -EIO;
	int h = rc_open(&p->c, p->ds, key, rs);
	if (h >= 0 && rc_close_lazy(&p->c, (uint32_t)h) == 0)
		rc_submit(&p->c);
	pc_put(m, p);
	return h < 0 ? h : 0;
}

static bool listed_dir(struct mnt *m, const char *key);

/* Attributes of key: a file (written here, or OPEN answers) before a
 * directory (made here, or LIST finds something under it; or its
 * parent's listing, kept less than metadata_ttl, shows a prefix and no
 * object of that name). etag (may be NULL) gets an object's ETag, ""
 * for anything else. */
static int stat_key(struct mnt *m, const char *key, fuse_ino_t ino,
		    struct stat *st, char *etag)
{
	if (etag)
		etag[0] = 0;
	if (!*key) {
		fill_stat(m, st, ino, true, 0);
		return 0;
	}
	pthread_mutex_lock(&m->lock);
	struct wfile *w = wfile_find(m, key);
	uint64_t wsize = w ? w->size : 0;
	bool made_here = !w && ldir_find(m, key);
	pthread_mutex_unlock(&m->lock);
	if (w) {
		fill_stat(m, st, ino, false, wsize);
		return 0;
	}
	/* a cold loader's first lookup: no HEAD, GET and LIST of a name
	 * that is only a prefix, before any of its files is read */
	if (listed_dir(m, key)) {
		fill_stat(m, st, ino, true, 0);
		return 0;
	}
	struct rc_stat rs;
	int h = open_key(m, key, &rs);
	if (h >= 0) {
		fill_stat(m, st, ino, false, rs.size);
		if (etag)
			memcpy(etag, rs.etag, RC_MAX_ETAG);
		return 0;
	}
	if (h != -ENOENT && h != -EINVAL) /* EINVAL: a name no key can have */
		return fs_err(h);
	int dir = made_here ? 1 : has_children(m, key);
	if (dir < 0)
		return dir;
	if (!dir)
		return -ENOENT;
	fill_stat(m, st, ino, true, 0);
	return 0;
}

/* no_open (m->lock held): n's pages are of another version than etag.
 * Reads fail ESTALE until the caller has dropped them (notify_inval_inode)
 * and called change_done; etag is the version reads take after. True
 * when the caller is the one to drop them. */
static bool change_begin(struct node *n, const char *etag)
{
	bool first = !n->inval_pending;
	snprintf(n->etag, sizeof(n->etag), "%s", etag);
	n->etag_ns = rc_now_ns();
	n->inval_pending = true;
	return first;
}

static void change_done(struct mnt *m, fuse_ino_t ino)
{
	pthread_mutex_lock(&m->lock);
	struct node *n = node_by_ino(m, ino);
	if (n)
		n->inval_pending = false;
	pthread_mutex_unlock(&m->lock);
}

/* An answer about key shows ETag etag: pages the kernel holds of
 * another version are not kept at the next open; with no opens
 * (m->no_open) they must go now: true, and the caller drops them
 * (notify_inval_inode, then change_done) before it answers. */
static bool saw_etag(struct mnt *m, struct node *n, const char *etag,
		     const struct stat *st)
{
	bool other = etag[0] && n->etag[0] && strcmp(n->etag, etag) != 0;
	n->size = (uint64_t)st->st_size;
	if (!other) {
		if (etag[0] && (n->etag[0] || atomic_load(&m->no_open))) {
			/* no_open: the version reads of n will be checked
			 * against, from the lookup that made it */
			snprintf(n->etag, sizeof(n->etag), "%s", etag);
			n->etag_ns = rc_now_ns();
		}
		return false;
	}
	if (atomic_load(&m->no_open))
		return change_begin(n, etag);
	n->etag[0] = 0;
	return false;
}

/* The kernel's pages and attributes of ino go (no request of ino is
 * waiting on this thread: the kernel waits for their pages' reads). */
static void drop_pages(struct mnt *m, fuse_ino_t ino)
{
	fuse_lowlevel_notify_inval_inode(m->se, ino, 0, 0);
	change_done(m, ino);
}

static void reply_entry(fuse_req_t req, struct mnt *m, const char *key)
{
	struct fuse_entry_param e = {0};
	char etag[RC_MAX_ETAG];
	int r = stat_key(m, key, 0, &e.attr, etag);
	if (r < 0) {
		fuse_reply_err(req, -r);
		return;
	}
	pthread_mutex_lock(&m->lock);
	struct node *n = node_get(m, key);
	bool drop = false;
	if (n) {
		n->nlookup++;
		drop = saw_etag(m, n, etag, &e.attr);
		e.ino = e.attr.st_ino = n->ino;
	}
	pthread_mutex_unlock(&m->lock);
	if (!n) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	if (drop)
		drop_pages(m, e.ino);
	e.attr_timeout = e.entry_timeout = m->ttl;
	fuse_reply_entry(req, &e);
}

/* A copy of ino's key, or NULL (ESTALE: forgotten; ENOMEM). */
static char *key_of(struct mnt *m, fuse_ino_t ino, int *err)
{
	pthread_mutex_lock(&m->lock);
	struct node *n = node_by_ino(m, ino);
	char *k = n ? strdup(n->key) : NULL;
	pthread_mutex_unlock(&m->lock);
	*err = !n ? -ESTALE : !k ? -ENOMEM : 0;
	return k;
}

/* ---- lookup, attributes, directories ----------------------------------- */

static void op_init(void *data, struct fuse_conn_info *conn)
{
	/* open(O_TRUNC) arrives as one open, not a truncate first: a
	 * rewrite is a new object, never an empty one in between. */
	if (conn->capable & FUSE_CAP_ATOMIC_O_TRUNC)
		conn->want |= FUSE_CAP_ATOMIC_O_TRUNC;
	conn->want &= ~(unsigned)FUSE_CAP_WRITEBACK_CACHE;
	/* Pages go when an open finds another ETag (and notify_inval_inode
	 * drops the attributes): no GETATTR before reads to compare times,
	 * which are the mount's anyway. */
	conn->want &= ~(unsigned)FUSE_CAP_AUTO_INVAL_DATA;
	conn->max_read = MAX_READ; /* as the mount option says */
	/* The largest the kernel offers (its bdi read_ahead_kb): it may
	 * only be lowered here. max_pages follows max_write (libfuse: 1 MiB,
	 * the kernel's FUSE_MAX_MAX_PAGES), so a READ carries up to 1 MiB. */
	conn->max_readahead = conn->max_readahead ? conn->max_readahead
						  : MAX_READ;
	/* Readahead READs are background requests, of which the kernel
	 * keeps max_background in flight for the whole mount (12 by
	 * default) and, past congestion_threshold (9), drops the async
	 * part of a readahead: 3 cold sequential readers then shared 12
	 * READs of 1 MiB. Room for several readers' whole windows. */
	conn->max_background = MAX_BACKGROUND;
	conn->congestion_threshold = MAX_BACKGROUND * 3 / 4;
	struct mnt *m = data;
	atomic_store(&m->no_open, !m->writable &&
		     (conn->capable & FUSE_CAP_NO_OPEN_SUPPORT));
}

static int list_page_add(struct pclient *p, const char *prefix, int n,
			 struct dirlist *l);
static void dirlist_free(struct dirlist *l);
static void fa_offer(struct mnt *m, const char *dir, struct dirlist *l);

/* The first lookup in a directory (again once metadata_ttl passed) LISTs
 * it first: one LIST page tells the daemon the size and ETag of up to
 * thousands of its objects (list_learn), so their OPENs complete at once
 * and a cold file is one GET, not a HEAD and a GET. Concurrent lookups
 * meanwhile go on as before. A directory the page holds whole is offered
 * to fetch-ahead (fa_offer): its sweep then needs no LIST of its own. */
static void list_ahead(struct mnt *m, fuse_ino_t parent)
{
	if (m->ttl < 1.0)
		return; /* the daemon keeps no metadata: HEADs anyway */
	uint64_t now = rc_now_ns(), ttl = (uint64_t)(m->ttl * 1e9);
	pthread_mutex_lock(&m->lock);
	struct node *d = node_by_ino(m, parent);
	char *prefix = NULL;
	if (d && (!d->listed_ns || now - d->listed_ns > ttl)) {
		d->listed_ns = now;
		if (asprintf(&prefix, *d->key ? "%s/" : "%s", d->key) < 0)
			prefix = NULL;
	}
	char *dir = prefix ? strdup(d->key) : NULL;
	pthread_mutex_unlock(&m->lock);
	struct pclient *p = prefix ? pc_get(m) : NULL;
	struct dirlist *l = NULL;
	int more = 1;
	if (p) {
		int n = rc_list(&p->c, p->ds, prefix, 0, p->list_buf, 0,
				LIST_BUF, &more);
		if (n >= 0 && !more && dir && m->ahead &&
		    (l = calloc(1, sizeof(*l))) &&
		    list_page_add(p, prefix, n, l) < 0) {
			dirlist_free(l);
			l = NULL;
		}
		pc_put(m, p);
	}
	if (l)
		fa_offer(m, dir, l);
	free(dir);
	free(prefix);
}

static void op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct mnt *m = fuse_req_userdata(req);
	char *key;
	pthread_mutex_lock(&m->lock);
	int r = child_key(m, parent, name, &key);
	pthread_mutex_unlock(&m->lock);
	if (r < 0) {
		fuse_reply_err(req, -r);
		return;
	}
	list_ahead(m, parent);
	reply_entry(req, m, key);
	free(key);
}

static void op_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup)
{
	struct mnt *m = fuse_req_userdata(req);
	pthread_mutex_lock(&m->lock);
	struct node *n = node_by_ino(m, ino);
	if (n)
		node_forget(m, n, nlookup);
	pthread_mutex_unlock(&m->lock);
	fuse_reply_none(req);
}

static void op_forget_multi(fuse_req_t req, size_t count,
			    struct fuse_forget_data *forgets)
{
	struct mnt *m = fuse_req_userdata(req);
	pthread_mutex_lock(&m->lock);
	for (size_t i = 0; i < count; i++) {
		struct node *n = node_by_ino(m, forgets[i].ino);
		if (n)
			node_forget(m, n, forgets[i].nlookup);
	}
	pthread_mutex_unlock(&m->lock);
	fuse_reply_none(req);
}

static void op_getattr(fuse_req_t req, fuse_ino_t ino,
		       struct fuse_file_info *fi)
{
	struct mnt *m = fuse_req_userdata(req);
	struct stat st;
	char etag[RC_MAX_ETAG];
	(void)fi;
	int r;
	char *key = key_of(m, ino, &r);
	if (key)
		r = stat_key(m, key, ino, &st, etag);
	free(key);
	if (r < 0) {
		fuse_reply_err(req, -r);
		return;
	}
	pthread_mutex_lock(&m->lock);
	struct node *n = node_by_ino(m, ino);
	uint64_t old_size = n ? n->size : 0;
	bool change = n && saw_etag(m, n, etag, &st);
	pthread_mutex_unlock(&m->lock);
	/* A GETATTR is often a reader's (a read past the size it knows).
	 * Another size: the kernel drops the pages itself as it takes the
	 * size from this reply; a notify_inval_inode racing the reply would
	 * have it discarded as older, and the read stop at the old size.
	 * The same size: the pages go after the reply. Reads fail ESTALE
	 * until then (change_begin). */
	fuse_reply_attr(req, &st, m->ttl);
	if (change && old_size == (uint64_t)st.st_size)
		drop_pages(m, ino);
	else if (change)
		change_done(m, ino);
}

static int dirlist_add(struct dirlist *l, const char *name, size_t len,
		       bool dir, uint64_t size)
{
	if (len == 0 || len > NAME_MAX_POSIX || memchr(name, '/', len) ||
	    (len == 1 && name[0] == '.') ||
	    (len == 2 && name[0] == '.' && name[1] == '.'))
		return 0; /* no POSIX name: "a//b", "a/./b", markers "a/" */
	if (RC_GROW(l->e, l->cap, (uint64_t)l->n + 1) < 0)
		return -ENOMEM;
	if (!(l->e[l->n].name = strndup(name, len)))
		return -ENOMEM;
	l->e[l->n].size = size;
	l->e[l->n++].dir = dir;
	return 0;
}

static void dirlist_free(struct dirlist *l)
{
	for (uint32_t i = 0; i < l->n; i++)
		free(l->e[i].name);
	free(l->e);
	free(l);
}

/* By name; a file before a directory of the same name. */
static int dentry_cmp(const void *a, const void *b)
{
	const struct dentry *x = a, *y = b;
	int c = strcmp(x->name, y->name);
	return c ? c : (int)x->dir - (int)y->dir;
}

/* Sorts and keeps the first of each name: "a" the object shadows the
 * prefix "a/", as lookup does. */
static void dirlist_dedupe(struct dirlist *l)
{
	if (l->n == 0)
		return; /* qsort of NULL is undefined, even for 0 entries */
	qsort(l->e, l->n, sizeof(*l->e), dentry_cmp);
	uint32_t out = 0;
	for (uint32_t i = 0; i < l->n; i++) {
		if (out && strcmp(l->e[out - 1].name, l->e[i].name) == 0) {
			free(l->e[i].name);
			continue;
		}
		l->e[out++] = l->e[i];
	}
	l->n = out;
}

/* The n entries of a LIST page in p's list buffer, of prefix, into l. */
static int list_page_add(struct pclient *p, const char *prefix, int n,
			 struct dirlist *l)
{
	size_t plen = strlen(prefix);
	const struct rc_list_entry *e = p->list_mem;
	int r = 0;
	for (int i = 0; i < n && r == 0; i++, e = rc_list_next(e)) {
		const char *name = rc_list_name(e);
		size_t len = e->name_len;
		if (len < plen || memcmp(name, prefix, plen) != 0)
			continue; /* not under the prefix: never shown */
		name += plen;
		len -= plen;
		if (e->is_prefix && len && name[len - 1] == '/')
			len--;
		r = dirlist_add(l, name, len, e->is_prefix,
				e->is_prefix ? 0 : e->size);
	}
	return r;
}

static int list_s3(struct pclient *p, const char *dir, struct dirlist *l)
{
	char *prefix;
	if (asprintf(&prefix, *dir ? "%s/" : "%s", dir) < 0)
		return -ENOMEM;
	uint64_t start = 0;
	int more = 1, r = 0;
	while (more && r == 0) {
		int n = rc_list(&p->c, p->ds, prefix, start, p->list_buf, 0,
				LIST_BUF, &more);
		if (n < 0 || (n == 0 && more)) {
			r = n < 0 ? fs_err(n) : -ENAMETOOLONG;
			break;
		}
		r = list_page_add(p, prefix, n, l);
		start += (uint64_t)n;
	}
	free(prefix);
	return r;
}

/* The directory's entries: LIST, plus what was written or made here. */
static int build_dirlist(struct mnt *m, const char *dir, struct dirlist *l)
{
	struct pclient *p = pc_get(m);
	int r = p ? list_s3(p, dir, l) : -EIO;
	if (p)
		pc_put(m, p);
	pthread_mutex_lock(&m->lock);
	size_t skip = *dir ? strlen(dir) + 1 : 0;
	for (struct wfile *w = m->wfiles; w && r == 0; w = w->next)
		if (w->key && in_dir(w->key, dir))
			r = dirlist_add(l, w->key + skip, strlen(w->key + skip),
					false, 0);
	for (struct ldir *d = m->ldirs; d && r == 0; d = d->next)
		if (in_dir(d->key, dir))
			r = dirlist_add(l, d->key + skip, strlen(d->key + skip),
					true, 0);
	/* a file or directory written deeper shows its first component */
	for (struct wfile *w = m->wfiles; w && r == 0; w = w->next) {
		if (!w->key || !under(w->key, dir) || in_dir(w->key, dir))
			continue;
		const char *c = w->key + skip;
		r = dirlist_add(l, c, strcspn(c, "/"), true, 0);
	}
	for (struct ldir *d = m->ldirs; d && r == 0; d = d->next) {
		if (!under(d->key, dir) || in_dir(d->key, dir))
			continue;
		const char *c = d->key + skip;
		r = dirlist_add(l, c, strcspn(c, "/"), true, 0);
	}
	pthread_mutex_unlock(&m->lock);
	if (r == 0)
		dirlist_dedupe(l);
	return r;
}

static void op_opendir(fuse_req_t req, fuse_ino_t ino,
		       struct fuse_file_info *fi)
{
	struct mnt *m = fuse_req_userdata(req);
	int r;
	char *key = key_of(m, ino, &r);
	struct dirlist *l = key ? calloc(1, sizeof(*l)) : NULL;
	r = !key ? r : !l ? -ENOMEM : build_dirlist(m, key, l);
	free(key);
	if (r < 0) {
		if (l)
			dirlist_free(l);
		fuse_reply_err(req, -r);
		return;
	}
	fi->fh = (uint64_t)(uintptr_t)l;
	fuse_reply_open(req, fi);
}

static void op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		       struct fuse_file_info *fi)
{
	struct dirlist *l = (struct dirlist *)(uintptr_t)fi->fh;
	char *buf = malloc(size);
	size_t used = 0;
	if (!buf) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	/* offsets: 1 ".", 2 "..", 2 + i + 1 entry i */
	for (size_t i = (size_t)off; i < l->n + 2; i++) {
		struct stat st = {.st_ino = ino, .st_mode = S_IFDIR};
		const char *name = i == 0 ? "." : i == 1 ? ".." : l->e[i - 2].name;
		if (i >= 2) {
			st.st_ino = UNKNOWN_INO; /* not looked up yet */
			st.st_mode = l->e[i - 2].dir ? S_IFDIR : S_IFREG;
		}
		size_t need = fuse_add_direntry(req, buf + used, size - used,
						name, &st, (off_t)(i + 1));
		if (need > size - used)
			break;
		used += need;
	}
	fuse_reply_buf(req, buf, used);
	free(buf);
}

static void op_releasedir(fuse_req_t req, fuse_ino_t ino,
			  struct fuse_file_info *fi)
{
	(void)ino;
	dirlist_free((struct dirlist *)(uintptr_t)fi->fh);
	fuse_reply_err(req, 0);
}

/* ---- fetching ahead of readers by path ----------------------------------- */
/* A loader that opens paths gives no plan, so a cold file is one GET when
 * its reader reads it: 8 readers, 8 GETs in flight. A reader that walks a
 * directory in listing order (every file, or every Nth when N readers
 * share the walk) is followed (ahead.c) from the files it reads from
 * their start, and the next files of its walk are fetched into the
 * daemon's cache meanwhile: a READ_KEY of their first byte, which brings
 * the first block (block_size) whole, its lease given back at once. So
 * fetch-ahead pins nothing, holds no handle, and is bounded as any
 * reader of the mount's uid is (max_inflight_per_uid, the cache's
 * eviction); here by AHEAD_MAX files per walk, FA_QUEUE waiting and
 * FA_THREADS x FA_BATCH in flight. A reader in random order causes none.
 *
 * The sweep, for readers in no order: a shuffled epoch reads every file
 * of its directories once, so once FA_SWEEP_AFTER distinct files of a
 * kept listing were read cold (from their start, neither fetched nor read
 * before, any readers together), fetching the rest of the directory costs
 * no GET that the epoch would not make anyway, and keeps 32 in flight
 * where 8 readers keep 8. Only while the cache keeps what is fetched
 * until it is read: a directory whose listed bytes exceed fa->budget is
 * never swept, and the swept bytes not read yet, all directories
 * together, stay within it (a file leaves the sum when it is read, or
 * when its listing's life ends). Whole files up to FA_SWEEP_FILE_MAX. */

static double fa_life(const struct mnt *m)
{
	return m->ttl > FA_LIST_MIN_S ? m->ttl : FA_LIST_MIN_S;
}

/* a's swept files no longer count against the budget: its listing's
 * life ended, or it goes. Under fa->lock. */
static void fa_sweep_end(struct fetcher *fa, struct alisting *a)
{
	for (uint32_t i = 0; a->unread && a->l && i < a->l->n; i++)
		if (a->st[i] == FA_SWEPT)
			a->st[i] = FA_FETCHED;
	fa->unread -= a->unread;
	a->unread = 0;
	a->sweeping = false;
}

static void fa_listing_free(struct fetcher *fa, struct alisting *a)
{
	fa_sweep_end(fa, a);
	if (a->l)
		dirlist_free(a->l);
	free(a->st);
	a->l = NULL;
	a->st = NULL;
	for (uint32_t i = 0; i < a->n_early; i++)
		free(a->early[i]);
	a->n_early = 0;
}

/* 0 is no directory (a free stream slot). */
static uint64_t fa_id(struct fetcher *fa)
{
	return ++fa->next_id;
}

static int dentry_name_cmp(const void *k, const void *e)
{
	return strcmp(k, ((const struct dentry *)e)->name);
}

/* dir's slot, its listing kept (a->l) or asked for (the next reads of
 * the walk find it); NULL: every slot is being listed. Under fa->lock. */
static struct alisting *fa_listing(struct mnt *m, const char *dir)
{
	struct fetcher *fa = &m->fa;
	struct alisting *lru = NULL;
	uint64_t now = rc_now_ns();
	double life = fa_life(m);
	for (unsigned i = 0; i < FA_LISTS; i++) {
		struct alisting *a = &fa->lists[i];
		if (a->dir && strcmp(a->dir, dir) == 0) {
			a->used = ++fa->tick;
			if (!a->listing && !a->want &&
			    now - a->built_ns > (uint64_t)(life * 1e9))
				a->want = true; /* the old one used meanwhile */
			if (a->want)
				pthread_cond_signal(&fa->cond);
			return a;
		}
		/* a free slot first, else the least recently used one */
		if (!a->listing && (!lru || (lru->dir && (!a->dir ||
						a->used < lru->used))))
			lru = a;
	}
	if (!lru) /* every slot is being listed */
		return NULL;
	char *copy = strdup(dir);
	if (!copy)
		return NULL;
	free(lru->dir);
	fa_listing_free(fa, lru);
	*lru = (struct alisting){.dir = copy, .used = ++fa->tick,
				 .want = true};
	pthread_cond_signal(&fa->cond);
	return lru;
}

/* Queues it (its key then the queue's) unless the queue is full or
 * the key is NULL (no memory): false, and nothing is queued. Under
 * fa->lock. */
static bool fa_queue(struct fetcher *fa, struct fa_item it)
{
	if (!it.key || fa->q_len == FA_QUEUE) {
		free(it.key);
		return false;
	}
	fa->queue[(fa->q_head + fa->q_len++) % FA_QUEUE] = it;
	return true;
}

/* A file of dir: its first len bytes (a walk's: 1, a sweep's: all). */
static bool fa_push(struct fetcher *fa, const char *dir, const char *name,
		    uint64_t len)
{
	char *fk;
	if (fa->q_len == FA_QUEUE ||
	    asprintf(&fk, *dir ? "%s/%s" : "%s%s", dir, name) < 0)
		return false;
	return fa_queue(fa, (struct fa_item){.key = fk, .len = len});
}

/* Entry idx of a was read from its start: it leaves the swept bytes,
 * counts as cold if nothing had fetched or read it, and the
 * FA_SWEEP_AFTER-th such file starts the sweep of a directory that fits
 * the budget. Under fa->lock. */
static void fa_seen(struct mnt *m, struct alisting *a, uint32_t idx)
{
	struct fetcher *fa = &m->fa;
	uint8_t *st = &a->st[idx];
	if (*st == FA_SWEPT) {
		a->unread -= a->l->e[idx].size;
		fa->unread -= a->l->e[idx].size;
	}
	bool cold = *st == FA_NONE;
	*st = FA_READ;
	if (!cold || ++a->cold != FA_SWEEP_AFTER || a->bytes > fa->budget ||
	    rc_now_ns() - a->built_ns > (uint64_t)(fa_life(m) * 1e9))
		return;
	a->sweeping = true;
	a->sweep_next = 0;
	fa->sweeps++;
	if (m->debug)
		fprintf(stderr, "ringcache mount: fetch-ahead: sweep of '%s': "
			"%u files read cold in no walk, %llu bytes listed "
			"(budget %llu)\n", a->dir, a->cold,
			(unsigned long long)a->bytes,
			(unsigned long long)fa->budget);
}

/* Queues the next files of the directories being swept, while the
 * budget and half the queue (the rest is the walks') allow. Under
 * fa->lock. Returns how many were queued. */
static unsigned fa_sweep_more(struct mnt *m)
{
	struct fetcher *fa = &m->fa;
	uint64_t now = rc_now_ns(), life = (uint64_t)(fa_life(m) * 1e9);
	unsigned n = 0;
	for (unsigned k = 0; k < FA_LISTS; k++) {
		struct alisting *a = &fa->lists[k];
		if (a->l && (a->sweeping || a->unread) &&
		    now - a->built_ns > life)
			fa_sweep_end(fa, a);
		while (a->sweeping && fa->q_len < FA_QUEUE / 2) {
			if (a->sweep_next >= a->l->n) {
				a->sweeping = false;
				break;
			}
			uint32_t i = a->sweep_next;
			const struct dentry *e = &a->l->e[i];
			if (e->dir || a->st[i] != FA_NONE || !e->size ||
			    e->size > FA_SWEEP_FILE_MAX) {
				a->sweep_next++;
				continue;
			}
			if (fa->unread + fa->files.unread + e->size >
			    fa->budget)
				break; /* until readers read what was swept */
			if (!fa_push(fa, a->dir, e->name, e->size)) {
				fa->dropped++;
				break;
			}
			a->st[i] = FA_SWEPT;
			a->unread += e->size;
			fa->unread += e->size;
			a->sweep_next++;
			fa->swept++;
			n++;
		}
	}
	return n;
}

/* A file of a's directory read from its start before a's listing came
 * (the first readers' first files, all at once): kept, up to the
 * FA_SWEEP_AFTER that can start a sweep, to count once it comes. Under
 * fa->lock. */
static void fa_early(struct alisting *a, const char *name)
{
	for (uint32_t i = 0; i < a->n_early; i++)
		if (strcmp(a->early[i], name) == 0)
			return;
	if (a->n_early < FA_SWEEP_AFTER &&
	    (a->early[a->n_early] = strdup(name)))
		a->n_early++;
}

/* l (deduped) becomes a's listing, with a new id so that no walk mixes
 * the indices of two, and the files read before it came are seen now.
 * Under fa->lock; l is a's or freed. True when a's sweep began. */
static bool fa_adopt(struct mnt *m, struct alisting *a, struct dirlist *l)
{
	struct fetcher *fa = &m->fa;
	uint8_t *st = calloc(l->n + 1, 1);
	if (!st) {
		dirlist_free(l);
		return false;
	}
	uint64_t bytes = 0;
	for (uint32_t i = 0; i < l->n; i++)
		bytes += l->e[i].size;
	if (m->debug)
		fprintf(stderr, "ringcache mount: fetch-ahead: listed '%s': "
			"%u names, %llu bytes\n", a->dir, l->n,
			(unsigned long long)bytes);
	char *early[FA_SWEEP_AFTER];
	uint32_t n_early = a->n_early;
	memcpy(early, a->early, n_early * sizeof(*early));
	a->n_early = 0;
	fa_listing_free(fa, a);
	a->l = l;
	a->st = st;
	a->bytes = bytes;
	a->cold = 0;
	a->id = fa_id(fa);
	a->built_ns = rc_now_ns();
	a->want = false;
	for (uint32_t i = 0; i < n_early; i++) {
		const struct dentry *e = l->n ?
			bsearch(early[i], l->e, l->n, sizeof(*l->e),
				dentry_name_cmp) : NULL;
		if (e && !e->dir && a->st[e - l->e] == FA_NONE)
			fa_seen(m, a, (uint32_t)(e - l->e));
		free(early[i]);
	}
	return a->sweeping;
}

/* A listing of dir that list_ahead made anyway, whole in one page: dir's
 * fetch-ahead needs no LIST of its own, and its sweep can begin with the
 * first readers' first files. A fresh listing kept already, or one a
 * fetcher is making, stays. */
static void fa_offer(struct mnt *m, const char *dir, struct dirlist *l)
{
	struct fetcher *fa = &m->fa;
	dirlist_dedupe(l);
	pthread_mutex_lock(&fa->lock);
	struct alisting *a = fa->n_threads ? fa_listing(m, dir) : NULL;
	bool fresh = a && a->l && rc_now_ns() - a->built_ns <=
		     (uint64_t)(fa_life(m) * 1e9);
	if (a && !a->listing && !fresh) {
		if (fa_adopt(m, a, l) && fa_sweep_more(m))
			pthread_cond_broadcast(&fa->cond);
		l = NULL;
	}
	pthread_mutex_unlock(&fa->lock);
	if (l)
		dirlist_free(l);
}

/* Whether the kept listing of key's directory, made less than
 * metadata_ttl ago, shows key as a prefix with no object of that name (a
 * file shadows a directory in a listing, as in lookup). Read-only
 * datasets only. */
static bool listed_dir(struct mnt *m, const char *key)
{
	struct fetcher *fa = &m->fa;
	const char *slash = strrchr(key, '/');
	size_t dlen = slash ? (size_t)(slash - key) : 0;
	const char *name = slash ? slash + 1 : key;
	bool dir = false;
	/* the daemon keeps no metadata, or this mount may have removed the
	 * prefix's last object since (unlink): LIST then, as before */
	if (m->ttl < 1.0 || m->writable)
		return false;
	pthread_mutex_lock(&fa->lock);
	uint64_t now = rc_now_ns(), ttl = (uint64_t)(m->ttl * 1e9);
	for (unsigned i = 0; i < FA_LISTS; i++) {
		const struct alisting *a = &fa->lists[i];
		if (!a->dir || !a->l || !a->l->n || now - a->built_ns > ttl ||
		    strlen(a->dir) != dlen || memcmp(a->dir, key, dlen) != 0)
			continue;
		const struct dentry *e = bsearch(name, a->l->e, a->l->n,
						 sizeof(*a->l->e),
						 dentry_name_cmp);
		dir = e && e->dir;
		break;
	}
	pthread_mutex_unlock(&fa->lock);
	return dir;
}

/* A reader (pid) read key from its start: follow its walk, and queue
 * the files to fetch ahead of it. Costs no call to the daemon. */
static void fa_note(struct mnt *m, uint64_t pid, const char *key)
{
	struct fetcher *fa = &m->fa;
	const char *slash = strrchr(key, '/');
	size_t dlen = slash ? (size_t)(slash - key) : 0;
	const char *name = slash ? slash + 1 : key;
	char *dir = strndup(key, dlen);
	if (!dir)
		return;
	pthread_mutex_lock(&fa->lock);
	struct alisting *a = fa->n_threads ? fa_listing(m, dir) : NULL;
	if (a && !a->l)
		fa_early(a, name);
	const struct dentry *e = a && a->l && a->l->n ?
		bsearch(name, a->l->e, a->l->n, sizeof(*a->l->e),
			dentry_name_cmp) : NULL;
	struct ahead_fetch f = {0};
	if (e) {
		fa_seen(m, a, (uint32_t)(e - a->l->e));
		f = ahead_note(&fa->ahead, pid, a->id,
			       (uint32_t)(e - a->l->e));
	}
	unsigned n = 0;
	for (uint32_t k = 0; k < f.count; k++) {
		uint64_t i = f.first + (uint64_t)k * f.stride;
		if (i >= a->l->n)
			break;
		if (a->l->e[i].dir || a->st[i] != FA_NONE)
			continue; /* fetched, swept or read already */
		if (!fa_push(fa, dir, a->l->e[i].name, 1)) {
			fa->dropped++;
			continue;
		}
		a->st[i] = FA_FETCHED;
		n++;
	}
	if (n) {
		fa->fired++;
		fa->queued += n;
		if (m->debug)
			fprintf(stderr, "ringcache mount: fetch-ahead: pid %llu "
				"in '%s': %u files from #%u step %u (window "
				"%u)\n", (unsigned long long)pid, dir, n,
				f.first, f.stride, f.window);
	}
	if (fa_sweep_more(m) || n)
		pthread_cond_broadcast(&fa->cond);
	pthread_mutex_unlock(&fa->lock);
	free(dir);
}

/* A READ of [off, off + len) of ino (key, size bytes): a reader that
 * reads the file in order gets the bytes past its READs fetched ahead
 * (fileahead.c says when and how far), in pieces of at most
 * FA_SWEEP_EXT blocks (one READ_KEY each, its blocks in flight
 * together). The budget is what the sweep leaves of -o ahead_bytes.
 * Costs no call to the daemon. */
static void fa_stream(struct mnt *m, fuse_ino_t ino, const char *key,
		      uint64_t size, uint64_t off, uint64_t len)
{
	struct fetcher *fa = &m->fa;
	uint64_t piece = (uint64_t)fa->block * FA_SWEEP_EXT;
	pthread_mutex_lock(&fa->lock);
	if (!fa->n_threads || !piece) {
		pthread_mutex_unlock(&fa->lock);
		return;
	}
	fa->files.budget = fa->budget > fa->unread ? fa->budget - fa->unread
						   : 0;
	fa->files.life_ns = (uint64_t)(fa_life(m) * 1e9);
	struct fileahead_fetch f = fileahead_note(&fa->files, ino, size, off,
						  len, rc_now_ns());
	unsigned n = 0;
	for (uint64_t at = f.off, end = f.off + f.len; at < end;) {
		/* to a block boundary: FA_SWEEP_EXT extents hold it */
		uint64_t next = at / fa->block * fa->block + piece;
		if (next > end)
			next = end;
		if (fa->q_len == FA_QUEUE ||
		    !fa_queue(fa, (struct fa_item){.key = strdup(key),
						   .off = at, .len = next - at,
						   .piece = true})) {
			fa->dropped++;
			break; /* its bytes leave the budget as it is read */
		}
		n++;
		at = next;
	}
	if (n) {
		fa->pieces += n;
		fa->piece_bytes += f.len;
		pthread_cond_broadcast(&fa->cond);
		if (m->debug)
			fprintf(stderr, "ringcache mount: fetch-ahead: '%s' "
				"read in order to %llu: %llu bytes from %llu "
				"(%u pieces, %llu bytes ahead in all)\n", key,
				(unsigned long long)(off + len),
				(unsigned long long)f.len,
				(unsigned long long)f.off, n,
				(unsigned long long)fa->files.unread);
	}
	pthread_mutex_unlock(&fa->lock);
}

/* A fetcher lists a directory asked for (fa->lock held on entry and
 * return; dropped meanwhile). Too large a directory keeps an empty
 * listing: no fetch-ahead there until it is listed again. */
static void fa_list(struct mnt *m, struct pclient *p, struct alisting *a)
{
	struct fetcher *fa = &m->fa;
	char *dir = strdup(a->dir);
	a->want = false;
	a->listing = true;
	pthread_mutex_unlock(&fa->lock);
	struct dirlist *l = dir ? calloc(1, sizeof(*l)) : NULL;
	int r = !l ? -ENOMEM : list_s3(p, dir, l);
	if (r == 0 && l->n > FA_LIST_MAX) {
		dirlist_free(l);
		l = calloc(1, sizeof(*l));
	}
	if (r == 0 && l)
		dirlist_dedupe(l);
	pthread_mutex_lock(&fa->lock);
	a->listing = false;
	if (r == 0 && l) {
		fa_adopt(m, a, l); /* its sweep: fa_sweep_more after */
	} else {
		if (l)
			dirlist_free(l);
		a->built_ns = rc_now_ns(); /* asked again after its life */
	}
	free(dir);
}

/* Fetches up to FA_BATCH queued files together: each item's len bytes
 * (a walk's: the first byte, so its first block comes whole into the
 * daemon's cache; a sweep's: the whole file), given back at once.
 * Called without fa->lock. */
static void fa_fetch(struct mnt *m, struct pclient *p, struct fa_item *it,
		     unsigned n)
{
	struct rc_read_req req[FA_BATCH];
	struct rc_extent ext[FA_BATCH][FA_SWEEP_EXT];
	for (unsigned i = 0; i < n; i++)
		req[i] = (struct rc_read_req){.key = it[i].key,
					      .offset = it[i].off,
					      .len = it[i].len,
					      .ext = ext[i],
					      .max_ext = FA_SWEEP_EXT};
	int r = rc_read_many(&p->c, p->ds, req, n);
	unsigned ok = 0, pieces = 0, pieces_ok = 0;
	for (unsigned i = 0; i < n; i++) {
		bool good = r == 0 && req[i].res >= 0;
		pieces += it[i].piece;
		pieces_ok += it[i].piece && good;
		ok += !it[i].piece && good;
		for (uint32_t j = 0; r == 0 && j < req[i].n_ext; j++)
			rc_release_lazy(&p->c, ext[i][j].lease);
	}
	rc_submit(&p->c);
	if (rc_reconnects(&p->c) != p->reconnects_seen) {
		p->reconnects_seen = rc_reconnects(&p->c);
		rc_unmap_old_arenas(&p->c);
	}
	pthread_mutex_lock(&m->fa.lock);
	m->fa.fetched += ok;
	m->fa.failed += n - pieces - ok;
	m->fa.pieces_failed += pieces - pieces_ok;
	pthread_mutex_unlock(&m->fa.lock);
}

struct fa_arg {
	struct mnt *m;
	struct pclient *p;
};

static void *fa_thread(void *arg)
{
	struct fa_arg *x = arg;
	struct mnt *m = x->m;
	struct pclient *p = x->p;
	struct fetcher *fa = &m->fa;
	free(x);
	/* attached now, not at the first fetch (which tries again) */
	(void)pc_attach(m, p);
	pthread_mutex_lock(&fa->lock);
	while (!fa->stop) {
		struct alisting *want = NULL;
		for (unsigned i = 0; i < FA_LISTS && !want; i++)
			if (fa->lists[i].want && !fa->lists[i].listing)
				want = &fa->lists[i];
		if (!want && !fa->q_len) {
			pthread_cond_wait(&fa->cond, &fa->lock);
			continue;
		}
		if (!p->attached) {
			pthread_mutex_unlock(&fa->lock);
			int r = pc_attach(m, p);
			pthread_mutex_lock(&fa->lock);
			if (r < 0) { /* the daemon is away: drop, as a miss */
				if (want)
					want->want = false;
				fa->failed += fa->q_len;
				while (fa->q_len) {
					free(fa->queue[fa->q_head].key);
					fa->q_head = (fa->q_head + 1) % FA_QUEUE;
					fa->q_len--;
				}
				continue;
			}
		}
		if (want) {
			fa_list(m, p, want);
			if (fa_sweep_more(m))
				pthread_cond_broadcast(&fa->cond);
			continue;
		}
		struct fa_item items[FA_BATCH];
		unsigned n = 0;
		while (n < FA_BATCH && fa->q_len) {
			items[n++] = fa->queue[fa->q_head];
			fa->q_head = (fa->q_head + 1) % FA_QUEUE;
			fa->q_len--;
		}
		pthread_mutex_unlock(&fa->lock);
		fa_fetch(m, p, items, n);
		for (unsigned i = 0; i < n; i++)
			free(items[i].key);
		pthread_mutex_lock(&fa->lock);
		fa_sweep_more(m); /* room in the queue again */
	}
	pthread_mutex_unlock(&fa->lock);
	return NULL;
}

/* After daemonizing (a fork keeps no threads). No fetcher: none fires. */
static void fa_start(struct mnt *m)
{
	struct fetcher *fa = &m->fa;
	for (unsigned i = 0; i < FA_THREADS; i++) {
		struct fa_arg *x = malloc(sizeof(*x));
		if (!x)
			break;
		*x = (struct fa_arg){m, &fa->pc[i]};
		pthread_mutex_lock(&fa->lock);
		int r = pthread_create(&fa->threads[fa->n_threads], NULL,
				       fa_thread, x);
		if (r == 0)
			fa->n_threads++;
		pthread_mutex_unlock(&fa->lock);
		if (r != 0) {
			free(x);
			break;
		}
	}
}

static void fa_stop(struct mnt *m)
{
	struct fetcher *fa = &m->fa;
	pthread_mutex_lock(&fa->lock);
	fa->stop = true;
	pthread_cond_broadcast(&fa->cond);
	unsigned n = fa->n_threads;
	pthread_mutex_unlock(&fa->lock);
	for (unsigned i = 0; i < n; i++)
		pthread_join(fa->threads[i], NULL);
	if (fa->fired || fa->sweeps || fa->pieces || m->debug)
		fprintf(stderr, "ringcache mount: %s: fetched ahead %llu files "
			"in %llu steps of walks (%llu failed, %llu not queued)"
			", swept %llu files in %llu directories, fetched "
			"ahead within files %llu bytes in %llu pieces (%llu "
			"failed)\n", m->dataset,
			(unsigned long long)fa->fetched,
			(unsigned long long)fa->fired,
			(unsigned long long)fa->failed,
			(unsigned long long)fa->dropped,
			(unsigned long long)fa->swept,
			(unsigned long long)fa->sweeps,
			(unsigned long long)fa->piece_bytes,
			(unsigned long long)fa->pieces,
			(unsigned long long)fa->pieces_failed);
}

static void fa_free(struct fetcher *fa)
{
	for (unsigned i = 0; i < FA_THREADS; i++)
		if (fa->pc[i].attached)
			rc_detach(&fa->pc[i].c);
	for (unsigned i = 0; i < FA_LISTS; i++) {
		free(fa->lists[i].dir);
		fa_listing_free(fa, &fa->lists[i]);
	}
	while (fa->q_len) {
		free(fa->queue[fa->q_head].key);
		fa->q_head = (fa->q_head + 1) % FA_QUEUE;
		fa->q_len--;
	}
	pthread_mutex_destroy(&fa->lock);
	pthread_cond_destroy(&fa->cond);
}

/* ---- reads ---------------------------------------------------------------- */

/* Leases go lazily, pushed to the daemon now: nothing stays pinned
 * while this session waits in the pool. */
static void release_all(struct pclient *p, const struct rc_extent *ext,
			int n)
{
	for (int i = 0; i < n; i++)
		if (ext[i].lease != RC_NO_LEASE)
			rc_release_lazy(&p->c, ext[i].lease);
	if (n)
		rc_submit(&p->c);
}

/* The bytes read came from another version than the open saw. A file
 * this mount wrote is read from staging until its upload ends, then from
 * S3 under S3's ETag: its bytes did not change (they are ours), so that
 * version is taken, once, if the size still matches. Anything else is
 * ESTALE: the object changed in S3 after open. */
static bool other_version_ok(struct mnt *m, struct ofile *of,
			     const struct rc_stat *st)
{
	pthread_mutex_lock(&m->lock);
	struct wfile *w = wfile_find(m, of->key);
	bool ours = w && w->state == W_SEALED && st->size == w->size;
	pthread_mutex_unlock(&m->lock);
	if (ours) {
		pthread_mutex_lock(&of->mu);
		memcpy(of->etag, st->etag, RC_MAX_ETAG);
		pthread_mutex_unlock(&of->mu);
	}
	return ours;
}

/* One READ_KEY of the open's key (its READs of later blocks in flight
 * together): the extents of [off, off + size) of the version open saw,
 * or -ESTALE with st the version found. */
static int read_range(struct pclient *p, struct ofile *of, size_t size,
		      off_t off, struct rc_extent *ext, struct iovec *iov,
		      int *count, struct rc_stat *stp)
{
	struct rc_stat st;
	int n = rc_read_key(&p->c, p->ds, of->key, (uint64_t)off, size, ext,
			    MAX_EXT, &st);
	*count = 0;
	if (n < 0)
		return n;
	pthread_mutex_lock(&of->mu);
	bool same = strcmp(of->etag, st.etag) == 0;
	pthread_mutex_unlock(&of->mu);
	for (int i = 0; i < n && same; i++) {
		iov[i].iov_base = (void *)ext[i].data;
		iov[i].iov_len = ext[i].len;
		if (!ext[i].data && ext[i].len) {
			release_all(p, ext, n);
			return -EFAULT; /* the arena is not mapped here */
		}
	}
	if (!same) {
		release_all(p, ext, n);
		*stp = st;
		return -ESTALE;
	}
	*count = n;
	return 0;
}

struct inval_arg {
	struct mnt *m;
	fuse_ino_t ino;
};

static void *inval_later(void *p)
{
	struct inval_arg *a = p;
	struct mnt *m = a->m;
	drop_pages(m, a->ino);
	pthread_mutex_lock(&m->lock);
	if (--m->invals == 0)
		pthread_cond_broadcast(&m->invals_done);
	pthread_mutex_unlock(&m->lock);
	free(a);
	return NULL;
}

/* A read found another version than ino's pages hold: they go on a
 * thread of their own, as this read's reply (and other reads of ino,
 * which the kernel waits for) may need this worker's peers. */
static void drop_pages_later(struct mnt *m, fuse_ino_t ino)
{
	struct inval_arg *a = malloc(sizeof(*a));
	pthread_t t;
	pthread_mutex_lock(&m->lock);
	m->invals++;
	pthread_mutex_unlock(&m->lock);
	if (a) {
		*a = (struct inval_arg){m, ino};
		if (pthread_create(&t, NULL, inval_later, a) == 0) {
			pthread_detach(t);
			return;
		}
	}
	free(a);
	drop_pages(m, ino); /* this read has been answered already */
	pthread_mutex_lock(&m->lock);
	if (--m->invals == 0)
		pthread_cond_broadcast(&m->invals_done);
	pthread_mutex_unlock(&m->lock);
}

/* A read without an open (m->no_open): a READ_KEY of ino's key,
 * checked against the version its pages hold (n->etag, set by the lookup
 * that made the node). Nothing is locked while a session is held: the
 * version is taken before, and a change that begins while this read is
 * in flight drops its pages after its reply (the kernel waits for it).
 * Another version in S3: ESTALE, and the old pages go (drop_pages_later)
 * so that the next reads see the new version whole. */
static void op_read_ino(fuse_req_t req, struct mnt *m, fuse_ino_t ino,
			size_t size, off_t off)
{
	struct rc_extent ext[MAX_EXT];
	struct iovec iov[MAX_EXT];
	char etag[RC_MAX_ETAG];
	pthread_mutex_lock(&m->lock);
	struct node *nd = node_by_ino(m, ino);
	int r = !nd || nd->inval_pending ? -ESTALE : 0;
	char *key = r == 0 ? strdup(nd->key) : NULL;
	uint64_t fsize = key ? nd->size : 0;
	if (key)
		memcpy(etag, nd->etag, RC_MAX_ETAG);
	pthread_mutex_unlock(&m->lock);
	if (r == 0 && !key)
		r = -ENOMEM;
	if (key && off == 0) /* a file read from its start: a walk? */
		fa_note(m, (uint64_t)fuse_req_ctx(req)->pid, key);
	if (key) /* read in order: its next bytes ahead of the kernel's */
		fa_stream(m, ino, key, fsize, (uint64_t)off, size);
	struct rc_stat st;
	struct pclient *p = r == 0 ? pc_get(m) : NULL;
	int n = !p ? (r < 0 ? r : -EIO)
		   : rc_read_key(&p->c, p->ds, key, (uint64_t)off, size, ext,
				 MAX_EXT, &st);
	free(key);
	r = n < 0 ? n : etag[0] && strcmp(etag, st.etag) != 0 ? -ESTALE : 0;
	for (int i = 0; r == 0 && i < n; i++) {
		iov[i].iov_base = (void *)ext[i].data;
		iov[i].iov_len = ext[i].len;
		if (!ext[i].data && ext[i].len)
			r = -EFAULT; /* the arena is not mapped here */
	}
	if (r == 0)
		fuse_reply_iov(req, iov, n);
	else
		fuse_reply_err(req, -fs_err(r));
	if (p) {
		release_all(p, ext, n > 0 ? n : 0);
		pc_put(m, p);
	}
	if (n < 0 || (r < 0 && r != -ESTALE))
		return;
	bool drop = false;
	pthread_mutex_lock(&m->lock);
	nd = node_by_ino(m, ino);
	if (nd && !nd->etag[0] && r == 0) { /* no lookup told it: this read */
		snprintf(nd->etag, sizeof(nd->etag), "%s", st.etag);
		nd->etag_ns = rc_now_ns();
	} else if (nd && r == -ESTALE && strcmp(nd->etag, st.etag) != 0) {
		drop = change_begin(nd, st.etag);
		nd->size = st.size;
	}
	pthread_mutex_unlock(&m->lock);
	if (drop)
		drop_pages_later(m, ino);
}

static void op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		    struct fuse_file_info *fi)
{
	struct mnt *m = fuse_req_userdata(req);
	struct ofile *of = (struct ofile *)(uintptr_t)fi->fh;
	struct rc_extent ext[MAX_EXT];
	struct iovec iov[MAX_EXT];
	int n = 0;
	if (!of) { /* the kernel opened the file by itself (no_open) */
		op_read_ino(req, m, ino, size, off);
		return;
	}
	if (of->w) {
		fuse_reply_err(req, ENOTSUP); /* not committed: nothing to read */
		return;
	}
	if (off == 0)
		fa_note(m, (uint64_t)fuse_req_ctx(req)->pid, of->key);
	fa_stream(m, ino, of->key, of->size, (uint64_t)off, size);
	struct rc_stat st;
	struct pclient *p = pc_get(m);
	int r = p ? read_range(p, of, size, off, ext, iov, &n, &st) : -EIO;
	if (r == -ESTALE) {
		pc_put(m, p); /* m->lock is never taken holding a session */
		p = other_version_ok(m, of, &st) ? pc_get(m) : NULL;
		r = p ? read_range(p, of, size, off, ext, iov, &n, &st)
		      : -ESTALE;
	}
	if (r < 0) {
		if (p)
			pc_put(m, p);
		fuse_reply_err(req, -fs_err(r));
		return;
	}
	/* The kernel copies from the arena mapping; the leases end after. */
	fuse_reply_iov(req, iov, n);
	release_all(p, ext, n);
	pc_put(m, p);
}


/* ---- writes --------------------------------------------------------------- */
/* Writes and namespace changes run one at a time under m->lock, on the
 * one session that holds the write handles: op_X takes the lock around
 * op_X_locked. Reads never wait for them (a long fsync included). */

/* A new object at key (WRITE_OPEN), replacing what this mount wrote
 * there before. */
static int start_write(struct mnt *m, const char *key, uid_t uid,
		       struct ofile **out)
{
	struct wfile *old = wfile_find(m, key);
	if (old && old->state == W_OPEN)
		return -EBUSY; /* one writer per file */
	struct ofile *of = calloc(1, sizeof(*of));
	struct wfile *w = calloc(1, sizeof(*w));
	char *k = strdup(key);
	int h = of && w && k ? rc_write_open(&m->c, m->ds, key) : -ENOMEM;
	if (h < 0) {
		free(of);
		free(w);
		free(k);
		return fs_err(h);
	}
	if (old)
		wfile_detach(old);
	*w = (struct wfile){.key = k, .handle = (uint32_t)h, .opens = 1,
			    .uid = uid, .next = m->wfiles};
	m->wfiles = w;
	m->n_wfiles++;
	of->w = w;
	*out = of;
	for (struct ldir **p = &m->ldirs; *p;) { /* now S3 has the parents */
		struct ldir *d = *p;
		if (under(key, d->key)) {
			*p = d->next;
			free(d->key);
			free(d);
		} else {
			p = &d->next;
		}
	}
	wfile_trim(m);
	return 0;
}

/* The object is complete: COMMIT. Later writes to it fail. */
static int seal(struct mnt *m, struct wfile *w)
{
	if (w->state != W_OPEN)
		return w->state == W_FAILED ? w->err : 0;
	int r = rc_commit(&m->c, w->handle);
	w->state = r < 0 ? W_FAILED : W_SEALED;
	w->err = r < 0 ? fs_err(r) : 0;
	return w->err;
}

static int open_mode_err(struct mnt *m, int flags)
{
	if (!m->writable)
		return -EROFS;
	/* O_RDWR is allowed (Pillow, h5py open "w+b") but its reads fail */
	if ((flags & O_ACCMODE) == O_RDONLY || (flags & O_APPEND))
		return -ENOTSUP; /* an object is written whole, once */
	return 0;
}

/* A warm file is a page-cache read: an open of the version the kernel
 * already holds keeps its pages (no FUSE round trip at all); any other
 * version drops them, so one read never mixes two versions' bytes (each
 * open's handle reads the version it opened). */
static bool keep_cache(struct node *n, const char *etag)
{
	bool same = n->etag[0] && strcmp(n->etag, etag) == 0;
	snprintf(n->etag, sizeof(n->etag), "%s", etag);
	n->etag_ns = rc_now_ns();
	return same;
}

/* The ETag the daemon gave for n less than metadata_ttl ago, trusted as
 * the kernel trusts its attributes: a warm open then asks the daemon
 * nothing (one FUSE round trip, no ring round trip). A replacement is
 * seen at most metadata_ttl after the daemon saw it. */
static bool etag_fresh(const struct mnt *m, const struct node *n)
{
	return m->ttl >= 1.0 && n->etag[0] &&
	       rc_now_ns() - n->etag_ns < (uint64_t)(m->ttl * 1e9);
}

/* An open for reading: the object's size and ETag now (OPEN, closed at
 * once: the open holds nothing in the daemon). Whether the kernel keeps
 * its pages; when the object changed under attributes the kernel still
 * trusts (for up to metadata_ttl), they go too, before the reply, so the
 * reader sees the new size. */
static int open_read(struct mnt *m, fuse_ino_t ino, const char *key,
		     struct ofile **out, bool *keep)
{
	struct ofile *of = calloc(1, sizeof(*of));
	if (!of || !(of->key = strdup(key))) {
		free(of);
		return -ENOMEM;
	}
	pthread_mutex_init(&of->mu, NULL);
	pthread_mutex_lock(&m->lock);
	struct wfile *w = wfile_find(m, key);
	bool busy = w && w->state == W_OPEN;
	struct node *n = node_by_ino(m, ino);
	bool warm = !busy && !w && n && etag_fresh(m, n);
	if (warm) {
		memcpy(of->etag, n->etag, RC_MAX_ETAG);
		of->size = n->size;
	}
	pthread_mutex_unlock(&m->lock);
	if (busy || warm) {
		if (busy) {
			pthread_mutex_destroy(&of->mu);
			free(of->key);
			free(of);
			return -EBUSY; /* not committed: nothing to read yet */
		}
		*keep = true;
		*out = of;
		return 0;
	}
	struct rc_stat st;
	int r = open_key(m, key, &st);
	if (r < 0) {
		pthread_mutex_destroy(&of->mu);
		free(of->key);
		free(of);
		return fs_err(r);
	}
	memcpy(of->etag, st.etag, RC_MAX_ETAG);
	of->size = st.size;
	pthread_mutex_lock(&m->lock);
	n = node_by_ino(m, ino);
	bool changed = n && ((n->etag[0] && strcmp(n->etag, st.etag) != 0) ||
			     n->size != st.size);
	*keep = n && keep_cache(n, st.etag);
	if (n)
		n->size = st.size;
	pthread_mutex_unlock(&m->lock);
	if (changed)
		fuse_lowlevel_notify_inval_inode(m->se, ino, 0, 0);
	*out = of;
	return 0;
}

static void op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct mnt *m = fuse_req_userdata(req);
	struct ofile *of = NULL;
	bool keep = false, reading = (fi->flags & O_ACCMODE) == O_RDONLY;
	int r = reading ? 0 : open_mode_err(m, fi->flags);
	char *key = r == 0 ? key_of(m, ino, &r) : NULL;
	if (key && reading) {
		r = open_read(m, ino, key, &of, &keep);
	} else if (key) {
		struct stat st;
		pthread_mutex_lock(&m->lock);
		if (!(fi->flags & O_TRUNC) &&
		    (r = stat_key(m, key, ino, &st, NULL)) == 0 && st.st_size)
			r = -ENOTSUP; /* rewriting part of an object */
		if (r == 0)
			r = start_write(m, key, fuse_req_ctx(req)->uid, &of);
		struct node *n = node_by_ino(m, ino);
		if (n)
			n->etag[0] = 0; /* whatever the kernel held is not this */
		pthread_mutex_unlock(&m->lock);
	}
	free(key);
	if (r < 0) {
		fuse_reply_err(req, -r);
		return;
	}
	if (reading && atomic_load(&m->no_open)) {
		/* The version and its pages were settled by open_read; from
		 * now on the kernel opens files by itself (no OPEN, FLUSH or
		 * RELEASE): reads come with no handle, see op_read_ino. */
		pthread_mutex_destroy(&of->mu);
		free(of->key);
		free(of);
		fuse_reply_err(req, ENOSYS);
		return;
	}
	fi->fh = (uint64_t)(uintptr_t)of;
	fi->keep_cache = keep;
	/* close() of a reader has nothing to commit: no FLUSH round trip */
	fi->noflush = reading;
	fuse_reply_open(req, fi);
}

static void op_create_locked(fuse_req_t req, fuse_ino_t parent,
			     const char *name, mode_t mode,
			     struct fuse_file_info *fi)
{
	struct mnt *m = fuse_req_userdata(req);
	struct ofile *of = NULL;
	char *key = NULL;
	(void)mode; /* S3 keeps no mode */
	int r = open_mode_err(m, fi->flags);
	if (r == 0)
		r = child_key(m, parent, name, &key);
	if (r == 0)
		r = start_write(m, key, fuse_req_ctx(req)->uid, &of);
	struct fuse_entry_param e = {0};
	struct node *n = r == 0 ? node_get(m, key) : NULL;
	if (r == 0 && !n)
		r = -ENOMEM;
	if (r < 0) {
		if (of) {
			rc_abort(&m->c, of->w->handle);
			of->w->state = W_FAILED;
			of->w->err = -EIO;
			of->w->opens = 0;
			wfile_detach(of->w);
			free(of);
		}
		free(key);
		fuse_reply_err(req, -r);
		return;
	}
	n->nlookup++;
	e.ino = n->ino;
	fill_stat(m, &e.attr, n->ino, false, 0);
	e.attr_timeout = e.entry_timeout = m->ttl;
	fi->fh = (uint64_t)(uintptr_t)of;
	fuse_reply_create(req, &e, fi);
	free(key);
}

static void op_create(fuse_req_t req, fuse_ino_t parent, const char *name,
		      mode_t mode, struct fuse_file_info *fi)
{
	struct mnt *m = fuse_req_userdata(req);
	pthread_mutex_lock(&m->lock);
	op_create_locked(req, parent, name, mode, fi);
	pthread_mutex_unlock(&m->lock);
}

static void op_write_locked(fuse_req_t req, fuse_ino_t ino, const char *buf,
			    size_t size, off_t off, struct fuse_file_info *fi)
{
	struct mnt *m = fuse_req_userdata(req);
	struct ofile *of = (struct ofile *)(uintptr_t)fi->fh;
	struct wfile *w = of->w;
	(void)ino;
	if (!w) {
		fuse_reply_err(req, EBADF);
		return;
	}
	if (w->state == W_DROPPED) {
		fuse_reply_write(req, size);
		return;
	}
	if (w->state != W_OPEN) { /* after fsync, or the write failed */
		fuse_reply_err(req, w->state == W_FAILED ? -w->err : ENOTSUP);
		return;
	}
	for (size_t done = 0; done < size;) {
		size_t n = size - done < IO_BUF ? size - done : IO_BUF;
		memcpy(m->io_mem, buf + done, n);
		ssize_t r = rc_write(&m->c, w->handle, (uint64_t)off + done, n,
				     m->io_buf, 0);
		if (r < 0) {
			fuse_reply_err(req, -fs_err((int)r));
			return;
		}
		done += n;
	}
	if ((uint64_t)off + size > w->size)
		w->size = (uint64_t)off + size;
	fuse_reply_write(req, size);
}

static void op_write(fuse_req_t req, fuse_ino_t ino, const char *buf,
		     size_t size, off_t off, struct fuse_file_info *fi)
{
	struct mnt *m = fuse_req_userdata(req);
	pthread_mutex_lock(&m->lock);
	op_write_locked(req, ino, buf, size, off, fi);
	pthread_mutex_unlock(&m->lock);
}

/* close(): COMMIT here, so its error reaches the caller's close(). */
static void op_flush_locked(fuse_req_t req, fuse_ino_t ino,
			    struct fuse_file_info *fi)
{
	struct mnt *m = fuse_req_userdata(req);
	struct ofile *of = (struct ofile *)(uintptr_t)fi->fh;
	(void)ino;
	if (!of) { /* opened by the kernel (no_open): nothing to commit, */
		fuse_reply_err(req, ENOSYS); /* and no FLUSH from now on */
		return;
	}
	fuse_reply_err(req, of->w ? -seal(m, of->w) : 0);
}

static void op_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct mnt *m = fuse_req_userdata(req);
	pthread_mutex_lock(&m->lock);
	op_flush_locked(req, ino, fi);
	pthread_mutex_unlock(&m->lock);
}

/* fsync of the descriptor that writes a file commits it (later writes
 * fail) and waits until S3 has it. Only that descriptor: through
 * allow_other another user's descriptor of the same name (a reader) used
 * to commit the owner's half-written file. Another descriptor of its
 * writer's uid (closed, reopened, fsync) waits for a file already
 * committed; any other fsync has nothing of its own to sync: 0. */
static void op_fsync_locked(fuse_req_t req, fuse_ino_t ino, int datasync,
			    struct fuse_file_info *fi)
{
	struct mnt *m = fuse_req_userdata(req);
	struct ofile *of = (struct ofile *)(uintptr_t)fi->fh;
	struct node *n = node_by_ino(m, ino);
	struct wfile *w = of ? of->w : NULL; /* NULL: no_open */
	(void)datasync;
	if (!w && n) {
		w = wfile_find(m, n->key);
		if (w && (w->state != W_SEALED ||
			  w->uid != fuse_req_ctx(req)->uid))
			w = NULL;
	}
	int r = w ? seal(m, w) : 0;
	if (r == 0 && w && w->state == W_SEALED)
		r = fs_err(rc_sync(&m->c, w->handle));
	fuse_reply_err(req, -r);
}

static void op_fsync(fuse_req_t req, fuse_ino_t ino, int datasync,
		     struct fuse_file_info *fi)
{
	struct mnt *m = fuse_req_userdata(req);
	pthread_mutex_lock(&m->lock);
	op_fsync_locked(req, ino, datasync, fi);
	pthread_mutex_unlock(&m->lock);
}

/* fsync of a directory: every file its caller's uid wrote under it is in
 * S3 (it commits nothing: files still open wait for their own close). */
static void op_fsyncdir_locked(fuse_req_t req, fuse_ino_t ino, int datasync,
			       struct fuse_file_info *fi)
{
	struct mnt *m = fuse_req_userdata(req);
	struct node *n = node_by_ino(m, ino);
	uid_t uid = fuse_req_ctx(req)->uid;
	int r = n ? 0 : -ESTALE;
	(void)datasync, (void)fi;
	for (struct wfile *w = m->wfiles; w && r == 0; w = w->next)
		if (w->key && w->state != W_OPEN && w->state != W_DROPPED &&
		    w->uid == uid && under(w->key, n->key))
			r = w->state == W_FAILED ? w->err
						 : fs_err(rc_sync(&m->c, w->handle));
	fuse_reply_err(req, -r);
}

static void op_fsyncdir(fuse_req_t req, fuse_ino_t ino, int datasync,
			struct fuse_file_info *fi)
{
	struct mnt *m = fuse_req_userdata(req);
	pthread_mutex_lock(&m->lock);
	op_fsyncdir_locked(req, ino, datasync, fi);
	pthread_mutex_unlock(&m->lock);
}

static void op_release_locked(fuse_req_t req, fuse_ino_t ino,
			      struct fuse_file_info *fi)
{
	struct mnt *m = fuse_req_userdata(req);
	struct ofile *of = (struct ofile *)(uintptr_t)fi->fh;
	(void)ino;
	if (!of) {
		/* not sent for a file the kernel opened (no_open) */
	} else if (of->w) {
		bool was_open = of->w->state == W_OPEN;
		int r = seal(m, of->w); /* no flush came (the caller died) */
		if (r < 0 && was_open)
			fprintf(stderr, "ringcache mount: %s: commit of '%s' "
				"failed: %s\n", m->dataset,
				of->w->key ? of->w->key : "(unlinked)",
				rc_strerror(r));
		of->w->opens--;
		wfile_trim(m);
	} else {
		pthread_mutex_destroy(&of->mu);
		free(of->key);
	}
	free(of);
	fuse_reply_err(req, 0);
}

static void op_release(fuse_req_t req, fuse_ino_t ino,
		       struct fuse_file_info *fi)
{
	struct mnt *m = fuse_req_userdata(req);
	pthread_mutex_lock(&m->lock);
	op_release_locked(req, ino, fi);
	pthread_mutex_unlock(&m->lock);
}

/* ---- namespace changes ---------------------------------------------------- */

static void op_rename_locked(fuse_req_t req, fuse_ino_t parent,
			     const char *name, fuse_ino_t newparent,
			     const char *newname, unsigned int flags)
{
	struct mnt *m = fuse_req_userdata(req);
	char *from = NULL, *to = NULL;
	int r = flags ? -EINVAL : !m->writable ? -EROFS : 0;
	if (r == 0)
		r = child_key(m, parent, name, &from);
	if (r == 0)
		r = child_key(m, newparent, newname, &to);
	struct wfile *w = r == 0 ? wfile_find(m, from) : NULL;
	if (r == 0 && !w) {
		struct stat st;
		/* Only the daemon's own write-back objects rename; `mv`
		 * falls back to copy (and unlink) on EXDEV. */
		r = stat_key(m, from, 0, &st, NULL);
		r = r < 0 ? r : -EXDEV;
	}
	if (r == 0 && w->state == W_FAILED)
		r = w->err;
	/* A committed file is renamed once S3 has it (a server-side copy):
	 * the daemon's free rename of an object mid-upload can leave the old
	 * key in S3 when that upload was already finishing. */
	if (r == 0 && w->state == W_SEALED)
		r = fs_err(rc_sync(&m->c, w->handle));
	if (r == 0)
		r = fs_err(rc_rename(&m->c, w->handle, to));
	if (r == 0) {
		struct wfile *old = wfile_find(m, to);
		if (old)
			wfile_detach(old);
		free(w->key);
		w->key = to;
		to = NULL;
		struct node *gone = node_by_key(m, w->key);
		if (gone)
			unlink_key(m, gone);
		struct node *moved = node_by_key(m, from);
		if (moved) {
			unlink_key(m, moved);
			char *k = strdup(w->key);
			if (k) {
				free(moved->key);
				moved->key = k;
				unsigned h = key_hash(k);
				moved->next_key = m->by_key[h];
				m->by_key[h] = moved;
			}
		}
		wfile_trim(m);
	}
	free(from);
	free(to);
	fuse_reply_err(req, -r);
}

static void op_rename(fuse_req_t req, fuse_ino_t parent, const char *name,
		      fuse_ino_t newparent, const char *newname,
		      unsigned int flags)
{
	struct mnt *m = fuse_req_userdata(req);
	pthread_mutex_lock(&m->lock);
	op_rename_locked(req, parent, name, newparent, newname, flags);
	pthread_mutex_unlock(&m->lock);
}

static void op_unlink_locked(fuse_req_t req, fuse_ino_t parent,
			     const char *name)
{
	struct mnt *m = fuse_req_userdata(req);
	char *key = NULL;
	int r = !m->writable ? -EROFS : child_key(m, parent, name, &key);
	struct wfile *w = r == 0 ? wfile_find(m, key) : NULL;
	if (w && w->state == W_OPEN) {
		/* a temporary file given up before close: drop it */
		rc_abort(&m->c, w->handle);
		w->state = W_DROPPED;
		wfile_detach(w);
		wfile_trim(m);
	} else if (r == 0) {
		struct stat st;
		r = stat_key(m, key, 0, &st, NULL);
		r = r < 0 ? r : -ENOTSUP; /* no DELETE in the ring API */
	}
	free(key);
	fuse_reply_err(req, -r);
}

static void op_unlink(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct mnt *m = fuse_req_userdata(req);
	pthread_mutex_lock(&m->lock);
	op_unlink_locked(req, parent, name);
	pthread_mutex_unlock(&m->lock);
}

static void op_mkdir_locked(fuse_req_t req, fuse_ino_t parent, const char *name,
			    mode_t mode)
{
	struct mnt *m = fuse_req_userdata(req);
	char *key = NULL;
	struct stat st;
	(void)mode;
	int r = !m->writable ? -EROFS : child_key(m, parent, name, &key);
	if (r == 0) {
		r = stat_key(m, key, 0, &st, NULL);
		r = r == 0 ? -EEXIST : r == -ENOENT ? 0 : r;
	}
	struct ldir *d = r == 0 ? calloc(1, sizeof(*d)) : NULL;
	if (r == 0 && !d)
		r = -ENOMEM;
	if (r < 0) {
		free(key);
		fuse_reply_err(req, -r);
		return;
	}
	d->key = key;
	d->next = m->ldirs;
	m->ldirs = d;
	reply_entry(req, m, key);
}

static void op_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name,
		     mode_t mode)
{
	struct mnt *m = fuse_req_userdata(req);
	pthread_mutex_lock(&m->lock);
	op_mkdir_locked(req, parent, name, mode);
	pthread_mutex_unlock(&m->lock);
}

static void op_rmdir_locked(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct mnt *m = fuse_req_userdata(req);
	char *key = NULL;
	int r = !m->writable ? -EROFS : child_key(m, parent, name, &key);
	if (r == 0) {
		r = has_children(m, key);
		struct ldir **p = &m->ldirs;
		while (*p && strcmp((*p)->key, key) != 0)
			p = &(*p)->next;
		if (r == 0 && *p) {
			struct ldir *d = *p;
			*p = d->next;
			free(d->key);
			free(d);
		} else if (r >= 0) {
			r = r ? -ENOTEMPTY : -ENOENT;
		}
	}
	free(key);
	fuse_reply_err(req, -r);
}

static void op_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct mnt *m = fuse_req_userdata(req);
	pthread_mutex_lock(&m->lock);
	op_rmdir_locked(req, parent, name);
	pthread_mutex_unlock(&m->lock);
}

/* Operations outside the subset, named so they fail with ENOTSUP (EROFS
 * on a read-only dataset) rather than the kernel's ENOSYS. */
static void not_in_subset(fuse_req_t req)
{
	struct mnt *m = fuse_req_userdata(req);
	fuse_reply_err(req, m->writable ? ENOTSUP : EROFS);
}

static void op_mknod(fuse_req_t req, fuse_ino_t parent, const char *name,
		     mode_t mode, dev_t rdev)
{
	(void)parent, (void)name, (void)mode, (void)rdev;
	not_in_subset(req);
}

static void op_symlink(fuse_req_t req, const char *link, fuse_ino_t parent,
		       const char *name)
{
	(void)link, (void)parent, (void)name;
	not_in_subset(req);
}

static void op_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent,
		    const char *newname)
{
	(void)ino, (void)newparent, (void)newname;
	not_in_subset(req);
}

/* truncate only to the size a file being written has; mode, owner and
 * times only on files written here (accepted, not stored: S3 has none),
 * so cp -p, tar x and shutil.copy2 work. */
static void op_setattr_locked(fuse_req_t req, fuse_ino_t ino, struct stat *attr,
			      int to_set, struct fuse_file_info *fi)
{
	struct mnt *m = fuse_req_userdata(req);
	struct node *n = node_by_ino(m, ino);
	struct ofile *of = fi ? (struct ofile *)(uintptr_t)fi->fh : NULL;
	struct wfile *w = of && of->w ? of->w : n ? wfile_find(m, n->key) : NULL;
	int r = !n ? -ESTALE : !m->writable ? -EROFS : 0;
	if (r == 0 && !w)
		r = -ENOTSUP;
	if (r == 0 && (to_set & FUSE_SET_ATTR_SIZE) &&
	    (w->state != W_OPEN || (uint64_t)attr->st_size != w->size))
		r = -ENOTSUP;
	struct stat st;
	if (r == 0)
		r = stat_key(m, n->key, ino, &st, NULL);
	if (r < 0)
		fuse_reply_err(req, -r);
	else
		fuse_reply_attr(req, &st, m->ttl);
}

static void op_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr,
		       int to_set, struct fuse_file_info *fi)
{
	struct mnt *m = fuse_req_userdata(req);
	pthread_mutex_lock(&m->lock);
	op_setattr_locked(req, ino, attr, to_set, fi);
	pthread_mutex_unlock(&m->lock);
}

static void op_statfs(fuse_req_t req, fuse_ino_t ino)
{
	struct mnt *m = fuse_req_userdata(req);
	struct statvfs sv = {0};
	(void)ino;
	sv.f_bsize = sv.f_frsize = m->c.block_size;
	sv.f_namemax = NAME_MAX_POSIX;
	fuse_reply_statfs(req, &sv);
}

static const struct fuse_lowlevel_ops ops = {
	.init = op_init,
	.lookup = op_lookup,
	.forget = op_forget,
	.forget_multi = op_forget_multi,
	.getattr = op_getattr,
	.setattr = op_setattr,
	.opendir = op_opendir,
	.readdir = op_readdir,
	.releasedir = op_releasedir,
	.open = op_open,
	.create = op_create,
	.read = op_read,
	.write = op_write,
	.flush = op_flush,
	.fsync = op_fsync,
	.fsyncdir = op_fsyncdir,
	.release = op_release,
	.rename = op_rename,
	.unlink = op_unlink,
	.mkdir = op_mkdir,
	.rmdir = op_rmdir,
	.mknod = op_mknod,
	.symlink = op_symlink,
	.link = op_link,
	.statfs = op_statfs,
};

/* ---- the command ---------------------------------------------------------- */

static void mount_usage(FILE *f)
{
	fprintf(f, "usage: ringcache mount [-f] [-d] [-o OPTIONS] DATASET DIR\n"
		   "  -f          stay in the foreground\n"
		   "  -d          FUSE debug output and fetch-ahead steps (implies -f)\n"
		   "  -o OPTIONS  FUSE mount options, e.g. allow_other, ro, and\n"
		   "              ahead_bytes=N[K|M|G]: bytes fetched into the cache\n"
		   "              ahead of readers and not read yet, at most:\n"
		   "              files swept for readers in no order, and bytes\n"
		   "              past the reads of files read in order\n"
		   "              (default: a quarter of the daemon's cache;\n"
		   "              0: no fetch-ahead at all)\n"
		   "Unmount with: fusermount3 -u DIR (or umount DIR as root).\n");
}

static int mnt_attach(struct mnt *m, const char *socket_path,
		      const char *dataset)
{
	struct rc_attach_opts o = {.gpu = -1, .numa_node = -1};
	int r = rc_attach(&m->c, socket_path, &o);
	if (r < 0) {
		fprintf(stderr, "ringcache mount: cannot attach to the daemon "
			"at %s: %s\n", socket_path ? socket_path : "(default)",
			rc_strerror(r));
		return -1;
	}
	m->ds = rc_dataset(&m->c, dataset);
	if (m->ds < 0) {
		fprintf(stderr, "ringcache mount: dataset '%s': %s\n", dataset,
			m->ds == -ENOENT ? "not in the daemon's config"
					 : rc_strerror(m->ds));
		rc_detach(&m->c);
		return -1;
	}
	m->writable = m->c.datasets[m->ds].access & RC_ACCESS_WRITE;
	int lb = rc_alloc_buffer(&m->c, LIST_BUF, &m->list_mem);
	int ib = lb < 0 ? lb : rc_alloc_buffer(&m->c, IO_BUF, &m->io_mem);
	if (ib < 0) {
		fprintf(stderr, "ringcache mount: buffers: %s\n",
			rc_strerror(ib));
		rc_detach(&m->c);
		return -1;
	}
	m->list_buf = (uint32_t)lb;
	m->io_buf = (uint32_t)ib;
	return 0;
}

/* The daemon's metadata_ttl (from its metrics): names and attributes
 * are trusted as long as the daemon trusts S3's answer. 1 s when the
 * daemon does not say (an older one). Read once: a reload that changes
 * it applies to mounts made after. */
static double daemon_ttl(const char *socket_path, uint64_t *capacity)
{
	size_t len = 1u << 20;
	char *buf = malloc(len);
	double ttl = 1.0;
	ssize_t n = buf ? rc_stats(NULL, socket_path, buf, len) : -ENOMEM;
	const char *at = n > 0 ? strstr(buf, "\n" TTL_METRIC " ") : NULL;
	if (at)
		ttl = strtod(at + strlen("\n" TTL_METRIC " "), NULL);
	/* and the cache's size (DRAM, all shards): the sweep's budget */
	at = n > 0 ? strstr(buf, "\n" FA_BUDGET_METRIC " ") : NULL;
	*capacity = at ? strtoull(at + strlen("\n" FA_BUDGET_METRIC " "),
				  NULL, 10) : 0;
	free(buf);
	return ttl;
}

/* -o ahead_bytes=N[K|M|G]: the sweep's budget (0: no fetch-ahead).
 * Returns -1 with the reason said when N is no byte count. */
static int parse_ahead_bytes(const char *v, uint64_t *out)
{
	char *end;
	errno = 0;
	unsigned long long n = strtoull(v, &end, 10);
	unsigned shift = 0;
	if (*end == 'K' || *end == 'k')
		shift = 10;
	else if (*end == 'M' || *end == 'm')
		shift = 20;
	else if (*end == 'G' || *end == 'g')
		shift = 30;
	if (shift)
		end++;
	if (end == v || *v == '-' || *end || errno ||
	    n > (UINT64_MAX >> shift)) {
		fprintf(stderr, "ringcache mount: -o ahead_bytes=%s: not a "
			"byte count (digits, then K, M or G if you like)\n",
			v);
		return -1;
	}
	*out = (uint64_t)n << shift;
	return 0;
}

static void mnt_free(struct mnt *m)
{
	for (unsigned i = 0; i < POOL_MAX; i++)
		if (m->pool[i].attached)
			rc_detach(&m->pool[i].c);
	for (unsigned b = 0; b < NODE_BUCKETS; b++) {
		for (struct node *n = m->by_ino[b], *next; n; n = next) {
			next = n->next_ino;
			free(n->key);
			free(n);
		}
	}
	for (struct wfile *w = m->wfiles, *next; w; w = next) {
		next = w->next;
		free(w->key);
		free(w);
	}
	for (struct ldir *d = m->ldirs, *next; d; d = next) {
		next = d->next;
		free(d->key);
		free(d);
	}
	fa_free(&m->fa);
	rc_detach(&m->c); /* open write handles: aborted, sealed: kept */
	pthread_mutex_destroy(&m->lock);
	pthread_mutex_destroy(&m->pool_lock);
	pthread_cond_destroy(&m->pool_cond);
	pthread_cond_destroy(&m->invals_done);
	free(m);
}

struct ra_arg {
	char *dir;
};

/* Raises the mount's readahead (its bdi's read_ahead_kb, root only) once
 * the kernel has the INIT reply, which may only lower it: a sequential
 * reader then has READs of up to 1 MiB in flight several at a time, and
 * a small object opened and read from its start comes in one READ (the
 * whole-object prefetch). The stat waits for INIT. Not root: 128 KiB. */
static void *raise_readahead(void *p)
{
	struct ra_arg *a = p;
	struct stat st;
	char path[96];
	if (stat(a->dir, &st) == 0) {
		snprintf(path, sizeof(path), "/sys/class/bdi/%u:%u/read_ahead_kb",
			 major(st.st_dev), minor(st.st_dev));
		FILE *f = fopen(path, "w");
		if (f) {
			fprintf(f, "%u\n", READAHEAD_KB);
			fclose(f);
		}
	}
	free(a->dir);
	free(a);
	return NULL;
}

static void start_raise_readahead(const char *dir)
{
	struct ra_arg *a = malloc(sizeof(*a));
	pthread_t t;
	if (!a || !(a->dir = realpath(dir, NULL))) {
		free(a);
		return;
	}
	if (pthread_create(&t, NULL, raise_readahead, a) != 0) {
		free(a->dir);
		free(a);
		return;
	}
	pthread_detach(t);
}

static int run_session(struct mnt *m, struct fuse_args *args,
		       const char *dir, bool foreground)
{
	struct fuse_session *se = fuse_session_new(args, &ops, sizeof(ops), m);
	int r = 1;
	if (!se)
		return 1; /* libfuse printed why (an unknown -o option) */
	m->se = se;
	/* A worker per request in flight, up to FUSE_WORKERS (libfuse's
	 * default is 10: with each READ one synchronous call, 10 READs in
	 * flight for the whole mount, where the kernel's readahead of a few
	 * readers sends many more). Workers stay around: a thread started
	 * per request would cost more than the request. */
	struct fuse_loop_config *lc = fuse_loop_cfg_create();
	if (!lc)
		goto out;
	fuse_loop_cfg_set_clone_fd(lc, 0);
	fuse_loop_cfg_set_max_threads(lc, FUSE_WORKERS);
	fuse_loop_cfg_set_idle_threads(lc, FUSE_WORKERS);
	if (fuse_set_signal_handlers(se) != 0)
		goto out;
	if (fuse_session_mount(se, dir) != 0)
		goto out_signals;
	char *abs_dir = realpath(dir, NULL); /* daemonize goes to / */
	fuse_daemonize(foreground);
	if (abs_dir)
		start_raise_readahead(abs_dir);
	free(abs_dir);
	if (m->ahead)
		fa_start(m);
	pthread_t warm;
	bool warming = pthread_create(&warm, NULL, pool_warm, m) == 0;
	r = fuse_session_loop_mt(se, lc) < 0 ? 1 : 0;
	if (warming)
		pthread_join(warm, NULL);
	fa_stop(m);
	pthread_mutex_lock(&m->lock); /* drop_pages_later use se */
	while (m->invals)
		pthread_cond_wait(&m->invals_done, &m->lock);
	pthread_mutex_unlock(&m->lock);
	fuse_session_unmount(se);
out_signals:
	fuse_remove_signal_handlers(se);
out:
	if (lc)
		fuse_loop_cfg_destroy(lc);
	fuse_session_destroy(se);
	return r;
}

int mount_main(int argc, char **argv, const char *socket_path)
{
	bool foreground = false, debug = false;
	const char *user_opts = NULL;
	int o;
	optind = 1;
	while ((o = getopt(argc, argv, "+fdo:h")) != -1) {
		switch (o) {
		case 'f': foreground = true; break;
		case 'd': debug = foreground = true; break;
		case 'o': user_opts = optarg; break;
		case 'h': mount_usage(stdout); return 0;
		default: mount_usage(stderr); return 2;
		}
	}
	if (argc - optind != 2) {
		mount_usage(stderr);
		return 2;
	}
	const char *dataset = argv[optind], *dir = argv[optind + 1];
	struct mnt *m = calloc(1, sizeof(*m));
	if (!m)
		return 1;
	m->dataset = dataset;
	m->socket_path = socket_path;
	m->next_ino = FUSE_ROOT_ID;
	pthread_mutexattr_t ma;
	pthread_mutexattr_init(&ma);
	pthread_mutexattr_settype(&ma, PTHREAD_MUTEX_RECURSIVE);
	pthread_mutex_init(&m->lock, &ma);
	pthread_mutexattr_destroy(&ma);
	pthread_mutex_init(&m->pool_lock, NULL);
	pthread_cond_init(&m->pool_cond, NULL);
	pthread_cond_init(&m->invals_done, NULL);
	pthread_mutex_init(&m->fa.lock, NULL);
	pthread_cond_init(&m->fa.cond, NULL);
	m->debug = debug;
	for (unsigned i = POOL_MAX; i-- > 0;) {
		m->pool[i].next = m->pool_idle;
		m->pool_idle = &m->pool[i];
	}
	clock_gettime(CLOCK_REALTIME, &m->mounted);
	if (mnt_attach(m, socket_path, dataset) < 0) {
		fa_free(&m->fa);
		pthread_mutex_destroy(&m->lock);
		pthread_mutex_destroy(&m->pool_lock);
		pthread_cond_destroy(&m->pool_cond);
		pthread_cond_destroy(&m->invals_done);
		free(m);
		return 1;
	}
	uint64_t capacity;
	m->ttl = daemon_ttl(socket_path, &capacity);
	m->fa.budget = capacity / FA_BUDGET_DIV;
	m->fa.block = m->c.block_size;
	struct node *root = node_get(m, "");
	if (!root) {
		mnt_free(m);
		return 1;
	}
	root->nlookup = 1;

	/* default_permissions: the kernel checks the modes above, so with
	 * allow_other others read but only the mounting user writes. */
	char fsname[RC_DATASET_NAME_MAX + 32], *base = NULL;
	snprintf(fsname, sizeof(fsname), "fsname=ringcache:%s", dataset);
	struct fuse_args args = FUSE_ARGS_INIT(0, NULL);
	/* escaped: a ',' in a dataset name adds no mount option */
	int r = fuse_opt_add_opt_escaped(&base, fsname) ||
		fuse_opt_add_opt(&base, "subtype=ringcache,default_permissions,"
				 "max_read=" RC_STR(MAX_READ)) ||
		(!m->writable && fuse_opt_add_opt(&base, "ro")) ||
		fuse_opt_add_arg(&args, "ringcache-mount") ||
		fuse_opt_add_arg(&args, "-o") || fuse_opt_add_arg(&args, base) ||
		(user_opts && (fuse_opt_add_arg(&args, "-o") ||
			       fuse_opt_add_arg(&args, user_opts))) ||
		(debug && fuse_opt_add_arg(&args, "-d"));
	free(base);
	/* ours, not the kernel's: taken out of the options libfuse sees */
	char *ahead = NULL;
	const struct fuse_opt own[] = {{"ahead_bytes=%s", 0, 0}, FUSE_OPT_END};
	if (!r && fuse_opt_parse(&args, &ahead, own, NULL) != 0)
		r = 1; /* libfuse said why */
	if (!r && ahead && parse_ahead_bytes(ahead, &m->fa.budget) < 0)
		r = 1;
	free(ahead);
	m->ahead = m->fa.budget > 0;
	r = r ? 1 : run_session(m, &args, dir, foreground);
	fuse_opt_free_args(&args);
	mnt_free(m);
	return r;
}
