/* s3_query.h - the strings of a request (s3_query.c): URI encoding, the
 * host and path for the client's addressing style, the queries of
 * ListObjectsV2 and the multipart operations (parameters in SigV4's
 * sorted order, so the signed and the sent query are one string), and
 * CompleteMultipartUpload's XML body. Private to src/s3.
 *
 * Ownership: every function returns fresh malloc'd strings the caller
 * frees; NULL (or -1) only when out of memory. */
#ifndef RC_S3_QUERY_H
#define RC_S3_QUERY_H

#include "s3_private.h"

char *s3_uri_encode(const char *s, int keep_slash);
int s3_build_target(const struct s3_client *c, const struct s3_req_params *p,
		    char **host_out, char **path_out);
/* ListObjectsV2's query; a multipart operation's (never empty). */
char *s3_list_query(const struct s3_req_params *p);
char *s3_multipart_query(const struct s3_req_params *p);
/* Parts escaped as XML text; their order is the server's to judge. */
char *s3_complete_body(const struct s3_req_params *p);

#endif
