/* test_regbuf.c - registered buffers: UNREGISTER_BUF succeeds unless an
 * operation still copies into that buffer, and then only that buffer is
 * -EBUSY. The proxy's first-byte latency keeps a READ_INTO in flight for
 * as long as the test needs. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdatomic.h>
#include <unistd.h>

#include "fixture/fixture.h"
#include "ringcache.h"

#define MiB (1024u * 1024u)

static struct fx_daemon D;
static struct fx_proxy P;
static struct ds_spec S;

static void kill_all(void)
{
	fx_daemon_kill(&D);
	fx_proxy_kill(&P);
}

static void proxy_set(const char *cmds, const char *want)
{
	const char *r = fx_proxy_control(&P, cmds);

	cr_assert_str_eq(r, want, "proxy control '%s' answered '%s'", cmds, r);
}

/* True once the daemon has taken every submitted entry. */
static bool wait_taken(struct rc_client *c)
{
	for (int i = 0; i < 30000; i++) { /* >= 30 s: a busy machine */
		if (atomic_load(&c->hdr->sq_head) == c->sq_local_tail)
			return true;
		usleep(1000);
	}
	return false;
}

Test(regbuf, unregister_is_busy_only_while_a_read_into_uses_it,
     .fini = kill_all)
{
	static const char *const opts[] = {"--latency-ms", "0", NULL};
	ds_spec_default(&S);
	fx_proxy_start(&P, opts);
	fx_daemon_init(&D);
	D.s3_endpoint = P.endpoint;
	fx_daemon_start(&D, NULL);

	struct rc_client c;
	struct rc_attach_opts o = {.gpu = -1, .numa_node = -1};
	cr_assert_eq(rc_attach(&c, D.socket_path, &o), 0);
	int ds = rc_dataset(&c, "ds");
	cr_assert_geq(ds, 0);
	size_t i = fx_ds_find(&S, "edge/block-plus-one");
	uint64_t size = ds_size(&S, i);
	char key[DS_KEY_MAX];
	int h = rc_open(&c, ds, ds_key(&S, i, key), NULL);
	cr_assert_geq(h, 0, "rc_open: %s", rc_strerror(h));
	void *buf, *other;
	int bi = rc_alloc_buffer(&c, 4 * MiB, &buf);
	int bo = rc_alloc_buffer(&c, MiB, &other);
	cr_assert(bi >= 0 && bo >= 0, "rc_alloc_buffer: %s",
		  rc_strerror(bi < 0 ? bi : bo));

	/* Unused: unregisters at once, and its index is then unknown. */
	cr_assert_eq(rc_unregister_buffer(&c, (uint32_t)bo), 0);
	cr_assert_eq(rc_unregister_buffer(&c, (uint32_t)bo), -EBADF);
	bo = rc_alloc_buffer(&c, MiB, &other);
	cr_assert_geq(bo, 0);

	/* A READ_INTO waiting for S3 holds its buffer, and only its own. */
	proxy_set("set latency-ms 2000\n", "ok\n");
	struct rc_sqe *sqe = rc_get_sqe(&c);
	cr_assert(sqe);
	rc_prep_read_into(sqe, (uint32_t)h, 0, size, (uint32_t)bi, 0, 7);
	cr_assert_eq(rc_submit(&c), 1);
	cr_assert(wait_taken(&c), "the daemon never took the READ_INTO");
	cr_assert_eq(rc_unregister_buffer(&c, (uint32_t)bi), -EBUSY);
	cr_assert_eq(rc_unregister_buffer(&c, (uint32_t)bo), 0,
		     "a buffer no op uses must unregister");
	struct rc_cqe *cqe;
	cr_assert_eq(rc_wait_cqe(&c, &cqe), 0);
	cr_assert_eq(cqe->user_data, 7);
	cr_assert_eq(cqe->res, (int32_t)size, "READ_INTO: %d", cqe->res);
	rc_cqe_seen(&c);
	fx_assert_ds_bytes(&S, i, 0, buf, size, "edge/block-plus-one");
	proxy_set("set latency-ms 0\n", "ok\n");

	/* Completed: free again; then READ_INTO into it is -EBADF. */
	cr_assert_eq(rc_unregister_buffer(&c, (uint32_t)bi), 0);
	cr_assert_eq(rc_read_into(&c, (uint32_t)h, 0, size, (uint32_t)bi, 0),
		     -EBADF);
	cr_assert_eq(rc_unregister_buffer(&c, (uint32_t)bi), -EBADF);
	rc_detach(&c);
	fx_daemon_stop(&D);
	fx_proxy_stop(&P);
}
