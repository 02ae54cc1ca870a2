/* s3.h - S3 requests over libcurl: the client (an endpoint, its region,
 * timeouts and retry policy, s3_client.c), and, through the headers it
 * includes, building and signing requests (s3_request.h), classifying
 * their outcomes and retrying (s3_result.h), parsing S3's XML (s3_xml.h)
 * and checksum values (s3_checksum.h). The rest of the tree includes
 * this header only.
 *
 * The module does not drive transfers: the reactor adds s3_req_easy() to
 * its curl multi handle, and tools call s3_perform() which blocks.
 * Ownership: an s3_client owns copies of its config strings; the
 * credentials provider is borrowed and must outlive it. */
#ifndef RC_S3_H
#define RC_S3_H

/* S3's largest object: 5 TiB. */
#define RC_S3_MAX_OBJECT (5ull << 40)

#include <curl/curl.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "creds.h"
#include "s3_checksum.h"
#include "s3_request.h"
#include "s3_result.h"
#include "s3_xml.h"

enum s3_addressing { S3_PATH_STYLE = 0, S3_VIRTUAL_HOSTED };

struct s3_config {
	const char *endpoint;    /* "http://127.0.0.1:9080", "https://s3.us-east-1.amazonaws.com";
				    NULL: https://s3.<region>.amazonaws.com */
	const char *region;      /* "us-east-1" */
	enum s3_addressing addressing;
	bool tls_verify;         /* true unless the config turns it off */
	const char *ca_file;     /* NULL: system store */
	long connect_timeout_ms; /* default 3000 */
	long request_timeout_ms; /* whole transfer, default 30000 */
	long low_speed_time_s;   /* abort if < 1 KB/s for this long, default 10 */
	unsigned max_retries;    /* default 5 */
	unsigned backoff_base_ms, backoff_cap_ms; /* default 50, 5000 */
	struct creds_provider *creds; /* borrowed */
};

struct s3_client;
struct s3_client *s3_client_new(const struct s3_config *cfg, char *err,
				size_t errlen);
void s3_client_free(struct s3_client *c);
const struct s3_config *s3_client_config(const struct s3_client *c);

#endif
