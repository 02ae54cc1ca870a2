/* ramfs.h - for the unit tests of the io_uring file users (tier,
 * journal): whether a path takes O_DIRECT, and a ramfs (which refuses
 * O_DIRECT) mounted in a private mount namespace to test the buffered
 * fallback. Header-only: each test program includes it once. */
#ifndef RC_TESTS_RAMFS_H
#define RC_TESTS_RAMFS_H

#include <criterion/criterion.h>
#include <fcntl.h>
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

static inline bool direct_works(const char *p)
{
	int fd = open(p, O_RDWR | O_CREAT | O_DIRECT, 0600);
	if (fd >= 0)
		close(fd);
	unlink(p);
	return fd >= 0;
}

/* Mounts a ramfs at DIR/ramfs into mnt; skips the test without
 * CAP_SYS_ADMIN. */
static inline void ramfs_mount(const char *dir, char *mnt, size_t len)
{
	snprintf(mnt, len, "%s/ramfs", dir);
	if (unshare(CLONE_NEWNS) < 0 ||
	    mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
		cr_skip_test("needs CAP_SYS_ADMIN to mount a ramfs");
	cr_assert_eq(mkdir(mnt, 0700), 0);
	cr_assert_eq(mount("none", mnt, "ramfs", 0, NULL), 0);
}

static inline void ramfs_umount(const char *mnt)
{
	umount(mnt);
	rmdir(mnt);
}

#endif
