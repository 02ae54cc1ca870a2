/* creds.h - the AWS credential chain: config, environment, shared
 * credentials file/profile, container endpoint, IMDSv2. */
#ifndef RC_CREDS_H
#define RC_CREDS_H

#include "s3_names.h"
#include "sigv4.h"


struct creds_config {
	enum creds_source source;
	const char *access_key, *secret_key, *session_token; /* may be NULL */
	const char *profile;          /* NULL: $AWS_PROFILE or "default" */
	const char *credentials_file; /* NULL: $AWS_SHARED_CREDENTIALS_FILE or ~/.aws/credentials */
	const char *imds_endpoint;    /* NULL: http://169.254.169.254 */
	long timeout_ms;              /* for the HTTP sources */
};

struct creds_provider;

/* Resolves credentials now (blocking HTTP for container/IMDS). On failure
 * returns NULL and writes a reason (never a secret) into err. */
struct creds_provider *creds_provider_new(const struct creds_config *cfg,
					  char *err, size_t errlen);
void creds_provider_free(struct creds_provider *p);
/* Reload: p takes fresh's credentials and sources (under p's lock, so a
 * shard signing meanwhile sees the old or the new, never a mix); fresh,
 * now holding the old ones, is freed. */
void creds_provider_replace(struct creds_provider *p,
			    struct creds_provider *fresh);

/* Current credentials, refreshed when they expire within 5 minutes.
 * Never waits for the network: the container and IMDS sources refresh on
 * the provider's helper thread while the old credentials keep serving.
 * Returns 0, or a negated errno if a refresh failed (or is still under
 * way: -EKEYEXPIRED) and the old ones have expired. anonymous is set for
 * CREDS_ANONYMOUS. */
int creds_get(struct creds_provider *p, struct rc_creds *out, int *anonymous);

/* Waits until a background refresh under way (if any) has finished and
 * its credentials are live: for tools and tests, never a reactor. */
void creds_wait_refresh(struct creds_provider *p);

/* Which source supplied the credentials ("config", "env", ...). */
const char *creds_source_name(const struct creds_provider *p);

/* Parses a container or IMDS credentials document (the JSON both HTTP
 * sources answer) into out: 0, or a negated errno with err saying why.
 * Exposed for the fuzzer (tests/fuzz/fuzz_creds_json.c). */
int creds_parse_json(const char *doc, size_t len, struct rc_creds *out,
		     char *err, size_t errlen);

#endif
