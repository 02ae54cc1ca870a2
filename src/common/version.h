/* version.h - the release this build is (meson's project version) and the
 * commit it was built from ("unknown" outside a git checkout). Defined in
 * the version.c meson generates from version.c.in at every build. */
#ifndef RC_VERSION_H
#define RC_VERSION_H

extern const char rc_build_version[];
extern const char rc_build_commit[];

#endif
