/* preflight.h - each dataset's bucket checked before a client asks: by
 * --check-config, at start and after a reload. One HeadBucket (the
 * bucket, the credentials, s3:ListBucket), and on its 403 a one-key
 * listing of the dataset's prefix to say why; short timeouts, no retry.
 * A failure is a warning, never a refusal: S3 may be away for a moment.
 *
 * Ownership: preflight_start copies what it checks from the config; its
 * thread borrows the credentials provider, which must outlive
 * preflight_join. */
#ifndef RC_PREFLIGHT_H
#define RC_PREFLIGHT_H

#include "config.h"
#include "s3.h"

/* err: 0 or a negated errno; text: the dataset, bucket, prefix and the
 * result (cause.h's words for a failure). */
typedef void (*preflight_report_fn)(void *ctx, const char *dataset, int err,
				    const char *text);

/* Blocking: every dataset of cfg, in order. */
void preflight_run(const struct rc_config *cfg, struct creds_provider *creds,
		   preflight_report_fn report, void *ctx);

struct preflight;
/* The same on a thread of its own, each result a log line (info, or a
 * warning for a failure). Returns the check that now runs: p itself when
 * it (the last one started, or NULL) still runs, and the new check is
 * skipped; else a new one, p joined and freed; NULL if none could start. */
struct preflight *preflight_start(struct preflight *p,
				  const struct rc_config *cfg,
				  struct creds_provider *creds);
/* Waits for p's request in flight (at most its timeouts), checks no
 * further dataset, frees p. */
void preflight_join(struct preflight *p);

#endif
