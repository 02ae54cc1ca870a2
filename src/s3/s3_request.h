/* s3_request.h - one S3 operation as a signed libcurl easy handle: the
 * operations, their parameters, building (s3_request.c: validation in
 * s3_op.c, path and query in s3_query.c) and the handle's accessors.
 *
 * Ownership: an s3_req owns its easy handle, header list, URL and
 * response buffer; a PUT or UploadPart body is borrowed from the caller
 * and must outlive the request (a retry of the connection rewinds it).
 * Use: s3_req_new, add s3_req_easy to a curl multi handle (or perform
 * it), then s3_req_result (s3_result.h) and s3_req_free. The request
 * comes back from curl through CURLOPT_PRIVATE. */
#ifndef RC_S3_REQUEST_H
#define RC_S3_REQUEST_H

#include <curl/curl.h>
#include <stddef.h>

#include "s3_types.h"

struct s3_client;

struct s3_req;
/* Builds and signs a request. Returns NULL with err set on bad params. */
struct s3_req *s3_req_new(struct s3_client *c, const struct s3_req_params *p,
			  char *err, size_t errlen);
CURL *s3_req_easy(struct s3_req *r);
/* Response body collected when no sink was given (error XML, list pages). */
const char *s3_req_body(const struct s3_req *r, size_t *len);
void s3_req_free(struct s3_req *r);
void *s3_req_get_private(const struct s3_req *r);
void s3_req_set_private(struct s3_req *r, void *priv);


#endif
