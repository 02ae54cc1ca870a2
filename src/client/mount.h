/* mount.h - `ringcache mount`: a dataset as a FUSE file system (mount.c). */
#ifndef RC_MOUNT_H
#define RC_MOUNT_H

/* argv[0] is "mount"; socket_path NULL means the library's default.
 * Returns the process exit status (0, 1 failure, 2 usage). */
int mount_main(int argc, char **argv, const char *socket_path);

#endif
