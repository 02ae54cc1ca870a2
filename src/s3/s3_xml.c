/* s3_xml.c - owns the decoders of S3's XML replies (s3_xml.h) on one
 * expat driver: an element stack of interned local names (namespaces
 * stripped), the text of the innermost element capped, no DOCTYPE, and
 * one end-of-element callback per document type. */
#include "s3_xml.h"

#include <errno.h>
#include <expat.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "decimal.h"
#include "log.h"
#include "vec.h"

#define XML_TEXT_CAP (64u << 10)        /* one element's text */

static void copy_str(char *dst, size_t dstlen, const char *src, size_t n)
{
	if (!dstlen)
		return;
	if (n >= dstlen)
		n = dstlen - 1;
	memcpy(dst, src, n);
	dst[n] = '\0';
}


/* Shared by both parsers: the element stack (local names, namespace
 * stripped) and the text of the innermost element being collected. */
#define XML_MAX_DEPTH 16

struct xml_ctx {
	XML_Parser parser;
	int depth;
	const char *stack[XML_MAX_DEPTH]; /* only names we match on */
	char *text;
	size_t text_len;
	uint32_t text_cap;
	bool collecting;
	char err[160];
	const char *root;      /* required root element */
	void (*on_end)(struct xml_ctx *x, const char *name);
	void *user;
};

static void xml_fail(struct xml_ctx *x, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static void xml_fail(struct xml_ctx *x, const char *fmt, ...)
{
	if (x->err[0])
		return;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(x->err, sizeof(x->err), fmt, ap);
	va_end(ap);
	XML_StopParser(x->parser, XML_FALSE);
}

/* With XML_ParserCreateNS names arrive as "URI|local": keep the local part. */
static const char *local_name(const char *name)
{
	const char *bar = strrchr(name, '|');
	return bar ? bar + 1 : name;
}

static const char *const known_names[] = {
	"ListBucketResult", "Contents", "CommonPrefixes", "Key", "Size",
	"ETag", "Prefix", "IsTruncated", "NextContinuationToken", "KeyCount",
	"Error", "Code", "Message",
	"InitiateMultipartUploadResult", "UploadId", "Bucket",
	"CompleteMultipartUploadResult", "Location", "CopyObjectResult",
	"LastModified", "ListMultipartUploadsResult", "Upload", "Initiated",
	"NextKeyMarker", "NextUploadIdMarker", "CopyPartResult", NULL,
};

static const char *intern_name(const char *name)
{
	for (const char *const *k = known_names; *k; k++)
		if (strcmp(*k, name) == 0)
			return *k;
	return "";
}

static void XMLCALL xml_start(void *userp, const XML_Char *name,
			      const XML_Char **attrs)
{
	struct xml_ctx *x = userp;
	(void)attrs;
	const char *local = local_name(name);

	if (x->depth == 0 && strcmp(local, x->root) != 0) {
		xml_fail(x, "root element is <%.40s>, expected <%s>", local, x->root);
		return;
	}
	if (x->depth >= XML_MAX_DEPTH) {
		xml_fail(x, "elements nested deeper than %d", XML_MAX_DEPTH);
		return;
	}
	x->stack[x->depth++] = intern_name(local);
	x->text_len = 0;
	x->collecting = true;
}

static void XMLCALL xml_end(void *userp, const XML_Char *name)
{
	struct xml_ctx *x = userp;

	if (x->text)
		x->text[x->text_len] = '\0';
	x->on_end(x, local_name(name));
	x->depth--;
	x->collecting = false;
	x->text_len = 0;
}

static void XMLCALL xml_text(void *userp, const XML_Char *s, int len)
{
	struct xml_ctx *x = userp;

	if (!x->collecting || len <= 0)
		return;
	if (x->text_len + (size_t)len + 1 > XML_TEXT_CAP) {
		xml_fail(x, "element text longer than %u bytes", XML_TEXT_CAP);
		return;
	}
	if (RC_GROW(x->text, x->text_cap, x->text_len + (size_t)len + 1)) {
		xml_fail(x, "out of memory");
		return;
	}
	memcpy(x->text + x->text_len, s, (size_t)len);
	x->text_len += (size_t)len;
}

/* S3 never sends a DTD; refusing one closes off entity expansion tricks. */
static void XMLCALL xml_doctype(void *userp, const XML_Char *name,
				const XML_Char *sysid, const XML_Char *pubid,
				int has_internal_subset)
{
	(void)name;
	(void)sysid;
	(void)pubid;
	(void)has_internal_subset;
	xml_fail(userp, "DOCTYPE not allowed");
}

static const char *xml_text_of(const struct xml_ctx *x)
{
	return x->text ? x->text : "";
}

/* True if the stack (below the element now closing) is exactly path. */
static bool xml_at(const struct xml_ctx *x, int n, ...)
{
	if (x->depth != n)
		return false;
	va_list ap;
	va_start(ap, n);
	bool match = true;
	for (int i = 0; i < n; i++)
		if (strcmp(x->stack[i], va_arg(ap, const char *)) != 0)
			match = false;
	va_end(ap);
	return match;
}

static int xml_run(struct xml_ctx *x, const char *doc, size_t len,
		   char *err, size_t errlen)
{
	int rc = 0;

	if (!doc || len == 0 || len > INT32_MAX) {
		rc_set_err(err, errlen, "empty XML document");
		return -EPROTO;
	}
	x->parser = XML_ParserCreateNS(NULL, '|');
	if (!x->parser) {
		rc_set_err(err, errlen, "out of memory");
		return -ENOMEM;
	}
	XML_SetUserData(x->parser, x);
	XML_SetElementHandler(x->parser, xml_start, xml_end);
	XML_SetCharacterDataHandler(x->parser, xml_text);
	XML_SetStartDoctypeDeclHandler(x->parser, xml_doctype);
	if (XML_Parse(x->parser, doc, (int)len, XML_TRUE) != XML_STATUS_OK) {
		if (!x->err[0])
			snprintf(x->err, sizeof(x->err), "%s at line %lu column %lu",
				 XML_ErrorString(XML_GetErrorCode(x->parser)),
				 (unsigned long)XML_GetCurrentLineNumber(x->parser),
				 (unsigned long)XML_GetCurrentColumnNumber(x->parser));
		rc_set_err(err, errlen, "malformed XML: %s", x->err);
		rc = -EPROTO;
	} else if (x->err[0]) {
		rc_set_err(err, errlen, "malformed XML: %s", x->err);
		rc = -EPROTO;
	}
	XML_ParserFree(x->parser);
	free(x->text);
	x->text = NULL;
	return rc;
}

/* -- ListBucketResult -- */

struct list_state {
	struct s3_list_page *page;
	struct s3_list_object cur;   /* the <Contents> being read */
	bool cur_has_key, cur_has_size;
	bool saw_truncated;
	uint32_t obj_cap, pfx_cap;
};

static void list_end_contents(struct xml_ctx *x, struct list_state *st)
{
	struct s3_list_page *pg = st->page;

	if (!st->cur_has_key || !st->cur_has_size) {
		xml_fail(x, "<Contents> without %s",
			 st->cur_has_key ? "<Size>" : "<Key>");
		return;
	}
	if (RC_GROW(pg->objects, st->obj_cap, pg->n_objects + 1)) {
		xml_fail(x, "out of memory");
		return;
	}
	pg->objects[pg->n_objects++] = st->cur;
	memset(&st->cur, 0, sizeof(st->cur));
	st->cur_has_key = st->cur_has_size = false;
}

static void list_add_prefix(struct xml_ctx *x, struct list_state *st)
{
	struct s3_list_page *pg = st->page;
	char *p = strdup(xml_text_of(x));

	if (!p || RC_GROW(pg->prefixes, st->pfx_cap, pg->n_prefixes + 1)) {
		free(p);
		xml_fail(x, "out of memory");
		return;
	}
	pg->prefixes[pg->n_prefixes++] = p;
}

static void list_contents_field(struct xml_ctx *x, struct list_state *st,
				const char *name)
{
	const char *t = xml_text_of(x);

	if (strcmp(name, "Key") == 0) {
		free(st->cur.key);
		st->cur.key = strdup(t);
		if (!st->cur.key)
			xml_fail(x, "out of memory");
		st->cur_has_key = true;
	} else if (strcmp(name, "Size") == 0) {
		if (!rc_parse_dec_u64(t, strlen(t), &st->cur.size))
			xml_fail(x, "<Size> '%.32s' is not a number", t);
		st->cur_has_size = true;
	} else if (strcmp(name, "ETag") == 0) {
		if (strlen(t) >= sizeof(st->cur.etag))
			xml_fail(x, "<ETag> longer than %zu bytes",
				 sizeof(st->cur.etag) - 1);
		else
			snprintf(st->cur.etag, sizeof(st->cur.etag), "%s", t);
	}
}

static void list_top_field(struct xml_ctx *x, struct list_state *st,
			   const char *name)
{
	const char *t = xml_text_of(x);

	if (strcmp(name, "IsTruncated") == 0) {
		if (strcmp(t, "true") == 0)
			st->page->truncated = true;
		else if (strcmp(t, "false") == 0)
			st->page->truncated = false;
		else
			xml_fail(x, "<IsTruncated> '%.16s' is not true/false", t);
		st->saw_truncated = true;
	} else if (strcmp(name, "NextContinuationToken") == 0) {
		free(st->page->next_token);
		st->page->next_token = strdup(t);
		if (!st->page->next_token)
			xml_fail(x, "out of memory");
	} else if (strcmp(name, "KeyCount") == 0) {
		uint64_t n;
		if (!rc_parse_dec_u64(t, strlen(t), &n))
			xml_fail(x, "<KeyCount> '%.32s' is not a number", t);
	} else if (strcmp(name, "Contents") == 0) {
		list_end_contents(x, st);
	}
}

static void list_on_end(struct xml_ctx *x, const char *name)
{
	struct list_state *st = x->user;

	/* depth counts the closing element itself. */
	if (xml_at(x, 2, "ListBucketResult", intern_name(name)))
		list_top_field(x, st, name);
	else if (xml_at(x, 3, "ListBucketResult", "Contents", intern_name(name)))
		list_contents_field(x, st, name);
	else if (xml_at(x, 3, "ListBucketResult", "CommonPrefixes", "Prefix"))
		list_add_prefix(x, st);
}

int s3_parse_list(const char *xml, size_t len, struct s3_list_page *page,
		  char *err, size_t errlen)
{
	struct list_state st = { .page = page };
	struct xml_ctx x = { .root = "ListBucketResult", .on_end = list_on_end,
			     .user = &st };

	memset(page, 0, sizeof(*page));
	int rc = xml_run(&x, xml, len, err, errlen);
	free(st.cur.key);
	if (rc == 0 && page->truncated &&
	    (!page->next_token || !page->next_token[0])) {
		rc_set_err(err, errlen,
			"malformed XML: truncated listing without NextContinuationToken");
		rc = -EPROTO;
	}
	if (rc < 0)
		s3_list_page_free(page);
	return rc;
}

void s3_list_page_free(struct s3_list_page *page)
{
	if (!page)
		return;
	for (size_t i = 0; i < page->n_objects; i++)
		free(page->objects[i].key);
	free(page->objects);
	for (size_t i = 0; i < page->n_prefixes; i++)
		free(page->prefixes[i]);
	free(page->prefixes);
	free(page->next_token);
	memset(page, 0, sizeof(*page));
}

/* -- Error -- */

struct error_state {
	char *code, *msg;
	size_t codelen, msglen;
};

static void error_on_end(struct xml_ctx *x, const char *name)
{
	struct error_state *st = x->user;
	const char *t = xml_text_of(x);

	if (xml_at(x, 2, "Error", "Code") && strcmp(name, "Code") == 0)
		copy_str(st->code, st->codelen, t, strlen(t));
	else if (xml_at(x, 2, "Error", "Message") && strcmp(name, "Message") == 0)
		copy_str(st->msg, st->msglen, t, strlen(t));
}

int s3_parse_error(const char *xml, size_t len, char *code, size_t codelen,
		   char *msg, size_t msglen)
{
	struct error_state st = { code, msg, codelen, msglen };
	struct xml_ctx x = { .root = "Error", .on_end = error_on_end, .user = &st };

	if (codelen)
		code[0] = '\0';
	if (msglen)
		msg[0] = '\0';
	return xml_run(&x, xml, len, NULL, 0);
}

/* -- one-value results: InitiateMultipartUpload, Complete, Copy -- */

struct field_state {
	const char *root, *field;
	char *buf;
	size_t buflen;
	bool seen;
	bool too_long;
};

static void field_on_end(struct xml_ctx *x, const char *name)
{
	struct field_state *st = x->user;
	const char *t = xml_text_of(x);

	if (!xml_at(x, 2, st->root, intern_name(name)) ||
	    strcmp(name, st->field) != 0)
		return;
	st->seen = true;
	if (strlen(t) >= st->buflen)
		xml_fail(x, "<%s> longer than %zu bytes", st->field, st->buflen - 1);
	else
		copy_str(st->buf, st->buflen, t, strlen(t));
}

/* The text of root/field; -EPROTO if the document has another root or,
 * when required, lacks the field. */
static int parse_field(const char *xml, size_t len, const char *root,
		       const char *field, bool required, char *buf,
		       size_t buflen, char *err, size_t errlen)
{
	struct field_state st = { .root = root, .field = field, .buf = buf,
				  .buflen = buflen };
	struct xml_ctx x = { .root = root, .on_end = field_on_end, .user = &st };

	if (buflen)
		buf[0] = '\0';
	int rc = xml_run(&x, xml, len, err, errlen);
	if (rc == 0 && required && !st.seen) {
		rc_set_err(err, errlen, "malformed XML: <%s> without <%s>", root, field);
		rc = -EPROTO;
	}
	return rc;
}

int s3_parse_upload_id(const char *xml, size_t len, char *buf, size_t buflen,
		       char *err, size_t errlen)
{
	int rc = parse_field(xml, len, "InitiateMultipartUploadResult",
			     "UploadId", true, buf, buflen, err, errlen);
	if (rc == 0 && !buf[0]) {
		rc_set_err(err, errlen, "malformed XML: empty <UploadId>");
		rc = -EPROTO;
	}
	return rc;
}

/* ETags compare with the header's form, quotes included; RGW's bodies
 * leave them out. */
static void quote_etag(char *etag, size_t etaglen)
{
	size_t n = strlen(etag);

	if (n == 0 || etag[0] == '"' || n + 3 > etaglen)
		return;
	memmove(etag + 1, etag, n);
	etag[0] = '"';
	etag[n + 1] = '"';
	etag[n + 2] = '\0';
}

int s3_parse_complete(const char *xml, size_t len, char *etag,
		      size_t etaglen, char *err, size_t errlen)
{
	int rc = parse_field(xml, len, "CompleteMultipartUploadResult", "ETag",
			     false, etag, etaglen, err, errlen);
	if (rc == 0)
		quote_etag(etag, etaglen);
	return rc;
}

/* The required ETag of a copy's answer (root: which copy). */
static int parse_copy_etag(const char *xml, size_t len, const char *root,
			   char *etag, size_t etaglen, char *err, size_t errlen)
{
	int rc = parse_field(xml, len, root, "ETag", true, etag, etaglen, err,
			     errlen);
	if (rc == 0)
		quote_etag(etag, etaglen);
	return rc;
}

int s3_parse_copy_result(const char *xml, size_t len, char *etag,
			 size_t etaglen, char *err, size_t errlen)
{
	return parse_copy_etag(xml, len, "CopyObjectResult", etag, etaglen,
			       err, errlen);
}

int s3_parse_copy_part_result(const char *xml, size_t len, char *etag,
			      size_t etaglen, char *err, size_t errlen)
{
	return parse_copy_etag(xml, len, "CopyPartResult", etag, etaglen, err,
			       errlen);
}

/* -- ListMultipartUploadsResult -- */

struct uploads_state {
	struct s3_upload_page *page;
	struct s3_upload cur;        /* the <Upload> being read */
	uint32_t cap;
};

static char *replace_str(struct xml_ctx *x, char *old)
{
	char *s = strdup(xml_text_of(x));
	free(old);
	if (!s)
		xml_fail(x, "out of memory");
	return s;
}

static void uploads_end_upload(struct xml_ctx *x, struct uploads_state *st)
{
	struct s3_upload_page *pg = st->page;

	if (!st->cur.key || !st->cur.upload_id) {
		xml_fail(x, "<Upload> without %s", st->cur.key ? "<UploadId>" : "<Key>");
		return;
	}
	if (RC_GROW(pg->uploads, st->cap, pg->n_uploads + 1)) {
		xml_fail(x, "out of memory");
		return;
	}
	pg->uploads[pg->n_uploads++] = st->cur;
	memset(&st->cur, 0, sizeof(st->cur));
}

static void uploads_top_field(struct xml_ctx *x, struct uploads_state *st,
			      const char *name)
{
	const char *t = xml_text_of(x);

	if (strcmp(name, "IsTruncated") == 0) {
		if (strcmp(t, "true") != 0 && strcmp(t, "false") != 0)
			xml_fail(x, "<IsTruncated> '%.16s' is not true/false", t);
		st->page->truncated = strcmp(t, "true") == 0;
	} else if (strcmp(name, "NextKeyMarker") == 0) {
		st->page->next_key_marker = replace_str(x, st->page->next_key_marker);
	} else if (strcmp(name, "NextUploadIdMarker") == 0) {
		st->page->next_upload_id_marker =
			replace_str(x, st->page->next_upload_id_marker);
	} else if (strcmp(name, "Upload") == 0) {
		uploads_end_upload(x, st);
	}
}

static void uploads_on_end(struct xml_ctx *x, const char *name)
{
	struct uploads_state *st = x->user;
	const char *in = intern_name(name);

	if (xml_at(x, 2, "ListMultipartUploadsResult", in)) {
		uploads_top_field(x, st, name);
	} else if (xml_at(x, 3, "ListMultipartUploadsResult", "Upload", in)) {
		if (strcmp(name, "Key") == 0)
			st->cur.key = replace_str(x, st->cur.key);
		else if (strcmp(name, "UploadId") == 0)
			st->cur.upload_id = replace_str(x, st->cur.upload_id);
		else if (strcmp(name, "Initiated") == 0)
			copy_str(st->cur.initiated, sizeof(st->cur.initiated),
				 xml_text_of(x), strlen(xml_text_of(x)));
	}
}

int s3_parse_uploads(const char *xml, size_t len, struct s3_upload_page *page,
		     char *err, size_t errlen)
{
	struct uploads_state st = { .page = page };
	struct xml_ctx x = { .root = "ListMultipartUploadsResult",
			     .on_end = uploads_on_end, .user = &st };

	memset(page, 0, sizeof(*page));
	int rc = xml_run(&x, xml, len, err, errlen);
	free(st.cur.key);
	free(st.cur.upload_id);
	if (rc == 0 && page->truncated &&
	    (!page->next_key_marker || !page->next_key_marker[0])) {
		rc_set_err(err, errlen,
			"malformed XML: truncated listing without NextKeyMarker");
		rc = -EPROTO;
	}
	if (rc < 0)
		s3_upload_page_free(page);
	return rc;
}

void s3_upload_page_free(struct s3_upload_page *page)
{
	if (!page)
		return;
	for (size_t i = 0; i < page->n_uploads; i++) {
		free(page->uploads[i].key);
		free(page->uploads[i].upload_id);
	}
	free(page->uploads);
	free(page->next_key_marker);
	free(page->next_upload_id_marker);
	memset(page, 0, sizeof(*page));
}

