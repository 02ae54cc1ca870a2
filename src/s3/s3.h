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

#include <curl/curl.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "creds.h"
#include "s3_checksum.h"
#include "s3_reach.h"
#include "s3_request.h"
#include "s3_result.h"
#include "s3_types.h"
#include "s3_xml.h"

struct s3_client;
struct s3_client *s3_client_new(const struct s3_config *cfg, char *err,
				size_t errlen);
void s3_client_free(struct s3_client *c);
const struct s3_config *s3_client_config(const struct s3_client *c);
/* The endpoint requests go to: the config's, or AWS's regional one
 * (https://s3.REGION.amazonaws.com) when it names none. */
const char *s3_client_endpoint(const struct s3_client *c);

#endif
