/* s3_xml.h - the decoders of S3's XML replies (expat, s3_xml.c): list
 * pages, multipart ids and pages, Complete/Copy results, <Error>.
 *
 * Every byte of a reply is hostile: a decoder returns 0 or -EPROTO with
 * err saying where (never the document's text), bounds every element's
 * text and depth, and refuses DOCTYPEs (no entity expansion).
 * Ownership: a page owns its strings; free it with its _free function.
 * A failed parse leaves the page empty (freeing it again is harmless). */
#ifndef RC_S3_XML_H
#define RC_S3_XML_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ListObjectsV2 page. Strings are owned by the page. */
struct s3_list_object {
	char *key;
	uint64_t size;
	char etag[128];
};
struct s3_list_page {
	struct s3_list_object *objects;
	size_t n_objects;
	char **prefixes;          /* CommonPrefixes */
	size_t n_prefixes;
	bool truncated;
	char *next_token;         /* NextContinuationToken, or NULL */
};
/* 0, or -EPROTO for malformed XML (err says where). */
int s3_parse_list(const char *xml, size_t len, struct s3_list_page *page,
		  char *err, size_t errlen);
void s3_list_page_free(struct s3_list_page *page);
/* InitiateMultipartUploadResult's UploadId into buf; 0 or -EPROTO. */
int s3_parse_upload_id(const char *xml, size_t len, char *buf, size_t buflen,
		       char *err, size_t errlen);

/* CompleteMultipartUploadResult or CopyObjectResult: the ETag in the
 * header's form, quotes included (added when the body has none, as RGW's
 * do). Complete's may be empty (RGW): HEAD has it. 0 or -EPROTO. */
int s3_parse_complete(const char *xml, size_t len, char *etag,
		      size_t etaglen, char *err, size_t errlen);
int s3_parse_copy_result(const char *xml, size_t len, char *etag,
			 size_t etaglen, char *err, size_t errlen);
/* UploadPartCopy's CopyPartResult: the part's ETag, as above. */
int s3_parse_copy_part_result(const char *xml, size_t len, char *etag,
			      size_t etaglen, char *err, size_t errlen);

/* ListMultipartUploads page. Strings are owned by the page. */
struct s3_upload {
	char *key;
	char *upload_id;
	char initiated[40];       /* ISO 8601 as the server sent it */
};
struct s3_upload_page {
	struct s3_upload *uploads;
	size_t n_uploads;
	bool truncated;
	char *next_key_marker, *next_upload_id_marker; /* or NULL */
};
int s3_parse_uploads(const char *xml, size_t len, struct s3_upload_page *page,
		     char *err, size_t errlen);
void s3_upload_page_free(struct s3_upload_page *page);

/* Parses an S3 <Error> document into code/message; 0 or -EPROTO. */
int s3_parse_error(const char *xml, size_t len, char *code, size_t codelen,
		   char *msg, size_t msglen);


#endif
