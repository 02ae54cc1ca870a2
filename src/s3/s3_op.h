/* s3_op.h - what each S3 operation is (s3_op.c): its HTTP method, whether
 * it names a key, sends a body or writes, and the validation of a
 * caller's s3_req_params before anything is built. Private to src/s3.
 *
 * Use: s3_op_method is NULL for an unknown op; s3_validate_params
 * returns 0, or -1 with err saying which parameter is wrong (it never
 * quotes a header value, which may be a caller's secret). */
#ifndef RC_S3_OP_H
#define RC_S3_OP_H

#include "s3_private.h"

const char *s3_op_method(enum s3_op op);
bool s3_op_has_key(enum s3_op op);
/* A caller's body (borrowed, resent on retries): PUT and UploadPart. */
bool s3_op_sends_body(enum s3_op op);
bool s3_op_is_multipart(enum s3_op op);
/* Operations that store or replace data: their digest errors count. */
bool s3_op_writes(enum s3_op op);

int s3_validate_params(const struct s3_req_params *p, char *err,
		       size_t errlen);

#endif
