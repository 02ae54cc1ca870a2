/* s3_response.h - capturing a response (s3_response.c): libcurl's header,
 * body, read and seek callbacks of an s3_req, which fill its response
 * half (status, ETag, lengths, Content-Range, the collected body) and
 * feed the PUT body. Private to src/s3.
 *
 * Every header and body byte is the server's, so hostile: numbers are
 * parsed with overflow checks, an over-long ETag is flagged rather than
 * cut, a ranged body must be the range asked for before the sink sees a
 * byte, and an in-memory body is capped (s3_resp_body_cap). A callback
 * that refuses a transfer says why in r->abort. */
#ifndef RC_S3_RESPONSE_H
#define RC_S3_RESPONSE_H

#include "s3_private.h"

/* CURLOPT_HEADERFUNCTION / WRITEFUNCTION, userp the s3_req. */
size_t s3_resp_on_header(char *data, size_t size, size_t nitems, void *userp);
size_t s3_resp_on_body(char *data, size_t size, size_t nmemb, void *userp);
/* CURLOPT_READFUNCTION / SEEKFUNCTION over r->body, userp the s3_req. */
size_t s3_resp_on_read(char *dst, size_t size, size_t nitems, void *userp);
int s3_resp_on_seek(void *userp, curl_off_t offset, int origin);

/* The most body bytes kept in memory for r's operation and status. */
size_t s3_resp_body_cap(const struct s3_req *r);

#endif
