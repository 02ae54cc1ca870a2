/* privfile.c - owns the rule that a file holding cached bytes is the
 * daemon's alone: refuse another uid's, take group and other bits away
 * (see privfile.h). */
#include "privfile.h"

#include <errno.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log.h"

int privfile_secure(int fd, const char *what, const char *path, char *err,
		    size_t errlen)
{
	struct stat sb;
	if (fstat(fd, &sb) < 0) {
		rc_set_err(err, errlen, "%s: stat %s: %s", what, path,
			   strerror(errno));
		return -1;
	}
	if (S_ISBLK(sb.st_mode)) {
		if (sb.st_mode & 0007) {
			rc_set_err(err, errlen, "%s: %s is a device every user "
				   "may open (mode %04o): refused, it would "
				   "hold cached bytes; chmod o-rw it",
				   what, path, (unsigned)(sb.st_mode & 07777));
			return -1;
		}
		return 0;
	}
	if (!S_ISREG(sb.st_mode)) {
		rc_set_err(err, errlen, "%s: %s is neither a regular file nor "
			   "a block device: refused", what, path);
		return -1;
	}
	if (sb.st_uid != geteuid()) {
		rc_set_err(err, errlen, "%s: %s is owned by uid %u, not by the "
			   "daemon's uid %u: refused (its owner could read the "
			   "cached bytes); remove it or chown it", what, path,
			   (unsigned)sb.st_uid, (unsigned)geteuid());
		return -1;
	}
	if (!(sb.st_mode & 0077))
		return 0;
	if (fchmod(fd, sb.st_mode & 0700) < 0) {
		rc_set_err(err, errlen, "%s: %s has mode %04o and chmod failed "
			   "(%s): refused, other users could read the cached "
			   "bytes", what, path, (unsigned)(sb.st_mode & 07777),
			   strerror(errno));
		return -1;
	}
	log_warn("%s: %s had mode %04o (readable by others): changed to "
		 "%04o, owner only", what, path, (unsigned)(sb.st_mode & 07777),
		 (unsigned)(sb.st_mode & 0700));
	return 0;
}
