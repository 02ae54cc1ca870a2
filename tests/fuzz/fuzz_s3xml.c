/* fuzz_s3xml.c - S3's XML decoders (s3.c): the first byte picks the
 * decoder (ListObjectsV2, InitiateMultipartUpload, CompleteMultipartUpload,
 * CopyObject, ListMultipartUploads, Error), the rest is the reply body.
 * What a decoder accepts must be well formed: strings end inside their
 * buffers, counts match the arrays. */
#include <string.h>

#include "fuzz.h"
#include "s3.h"

static void check_str(const char *s, size_t cap)
{
	FUZZ_CHECK(memchr(s, '\0', cap) != NULL);
}

static void list(const char *xml, size_t len)
{
	struct s3_list_page page;
	char err[256];
	memset(&page, 0, sizeof(page));
	if (s3_parse_list(xml, len, &page, err, sizeof(err)) == 0) {
		for (size_t i = 0; i < page.n_objects; i++) {
			FUZZ_CHECK(page.objects[i].key != NULL);
			check_str(page.objects[i].etag,
				  sizeof(page.objects[i].etag));
		}
		for (size_t i = 0; i < page.n_prefixes; i++)
			FUZZ_CHECK(page.prefixes[i] != NULL);
	} else {
		check_str(err, sizeof(err));
	}
	s3_list_page_free(&page);
}

static void uploads(const char *xml, size_t len)
{
	struct s3_upload_page page;
	char err[256];
	memset(&page, 0, sizeof(page));
	if (s3_parse_uploads(xml, len, &page, err, sizeof(err)) == 0) {
		for (size_t i = 0; i < page.n_uploads; i++) {
			FUZZ_CHECK(page.uploads[i].key != NULL);
			FUZZ_CHECK(page.uploads[i].upload_id != NULL);
			check_str(page.uploads[i].initiated,
				  sizeof(page.uploads[i].initiated));
		}
	}
	s3_upload_page_free(&page);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	const char *xml = (const char *)data + 1;
	size_t len = size - 1;
	char a[128], b[256], err[256];
	switch (data[0] % 7) {
	case 0:
		list(xml, len);
		break;
	case 1:
		if (s3_parse_upload_id(xml, len, a, sizeof(a), err,
				       sizeof(err)) == 0)
			check_str(a, sizeof(a));
		break;
	case 2:
		if (s3_parse_complete(xml, len, a, sizeof(a), err,
				      sizeof(err)) == 0)
			check_str(a, sizeof(a));
		break;
	case 3:
		if (s3_parse_copy_result(xml, len, a, sizeof(a), err,
					 sizeof(err)) == 0)
			check_str(a, sizeof(a));
		break;
	case 4:
		uploads(xml, len);
		break;
	case 5:
		if (s3_parse_error(xml, len, a, 64, b, sizeof(b)) == 0) {
			check_str(a, 64);
			check_str(b, sizeof(b));
		}
		break;
	case 6:
		if (s3_parse_copy_part_result(xml, len, a, sizeof(a), err,
					      sizeof(err)) == 0)
			check_str(a, sizeof(a));
		break;
	}
	return 0;
}
