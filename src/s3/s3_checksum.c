/* s3_checksum.c - owns the base64 integrity values S3 headers carry
 * (s3_checksum.h), over OpenSSL's EVP digests. */
#include "s3_checksum.h"

#include <openssl/evp.h>
#include <string.h>

int s3_md5(const void *data, size_t len, unsigned char md5[16])
{
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int n = 0;

	if (EVP_Digest(data ? data : "", len, md, &n, EVP_md5(), NULL) != 1 ||
	    n != 16) {
		memset(md5, 0, 16);
		return -1;
	}
	memcpy(md5, md, 16);
	return 0;
}

/* One EVP digest over the pieces, in order: out gets want bytes, or
 * zeros and -1. */
static int digest_pieces(const EVP_MD *type, const struct s3_piece *pieces,
			 unsigned n, unsigned char *out, unsigned int want)
{
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int len = 0;
	EVP_MD_CTX *ctx = EVP_MD_CTX_new();
	int ok = ctx && EVP_DigestInit_ex(ctx, type, NULL) == 1;

	for (unsigned i = 0; ok && i < n; i++)
		ok = EVP_DigestUpdate(ctx, pieces[i].data, pieces[i].len) == 1;
	ok = ok && EVP_DigestFinal_ex(ctx, md, &len) == 1 && len == want;
	EVP_MD_CTX_free(ctx);
	if (!ok) {
		memset(out, 0, want);
		return -1;
	}
	memcpy(out, md, want);
	return 0;
}

int s3_md5_pieces(const struct s3_piece *pieces, unsigned n,
		  unsigned char md5[16])
{
	return digest_pieces(EVP_md5(), pieces, n, md5, 16);
}

int s3_sha256_pieces(const struct s3_piece *pieces, unsigned n,
		     unsigned char sha256[32])
{
	return digest_pieces(EVP_sha256(), pieces, n, sha256, 32);
}

void s3_md5_b64(const unsigned char md5[16], bool ok, char out[25])
{
	if (!ok) {
		out[0] = '\0';
		return;
	}
	EVP_EncodeBlock((unsigned char *)out, md5, 16);
}

void s3_content_md5(const void *data, size_t len, char out[25])
{
	unsigned char md5[16];

	s3_md5_b64(md5, s3_md5(data, len, md5) == 0, out);
}

void s3_crc32c_b64(uint32_t crc, char out[9])
{
	unsigned char be[4] = { (unsigned char)(crc >> 24), (unsigned char)(crc >> 16),
				(unsigned char)(crc >> 8), (unsigned char)crc };

	EVP_EncodeBlock((unsigned char *)out, be, 4);
}
