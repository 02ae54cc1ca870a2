/* s3_names.h - owns the names the config gives the S3 layer's choices:
 * the addressing style and the credential source (and S3's largest
 * object, a bound the config checks sizes against). The config (common)
 * parses them and the s3 layer acts on them, so they live below both. */
#ifndef RC_S3_NAMES_H
#define RC_S3_NAMES_H

/* S3's largest object: 5 TiB. */
#define RC_S3_MAX_OBJECT (5ull << 40)

enum s3_addressing { S3_PATH_STYLE = 0, S3_VIRTUAL_HOSTED };

enum creds_source {
	CREDS_AUTO = 0,  /* the standard chain, in order */
	CREDS_CONFIG,    /* access_key/secret_key from the config only */
	CREDS_ENV,
	CREDS_FILE,
	CREDS_CONTAINER,
	CREDS_IMDS,
	CREDS_ANONYMOUS, /* unsigned requests (public buckets) */
};

#endif
