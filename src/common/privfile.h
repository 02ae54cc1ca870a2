/* privfile.h - files the daemon keeps cached or staged bytes in (the NVMe
 * tier, the write-back journals) are its own alone.
 *
 * open(O_CREAT, 0600) sets the mode only of a file it creates: one that
 * already exists (pre-created by an installer, a drop-in's ExecStartPre,
 * or another user in a shared directory) keeps its mode and owner, and
 * every byte the daemon then writes there is readable by whoever the
 * mode admits. privfile_secure() decides on the open descriptor, so the
 * file checked is the file used (no name is looked up again):
 *   - a regular file owned by another uid is refused: its owner can read
 *     it (and chmod it back) whatever mode the daemon sets;
 *   - a regular file of the daemon's uid with group or other bits is
 *     fchmod()ed to 0600, and one warning says so (path, old mode);
 *   - a block device that others may read or write is refused (the
 *     daemon does not change a device node's mode: udev would put it
 *     back); group access (root:disk 0660) is the system's choice.
 * Returns 0, or -1 with err set to one line naming the path and why. */
#ifndef RC_PRIVFILE_H
#define RC_PRIVFILE_H

#include <stddef.h>

int privfile_secure(int fd, const char *what, const char *path, char *err,
		    size_t errlen);

#endif
