/* s3_result.c - owns what a finished request means (s3_result.h): curl
 * errors, callback aborts, HTTP statuses and S3 error codes classified
 * into a negated errno with a retry verdict; the checks a 2xx must pass
 * (ranges, lengths, an <Error> inside a 200); the backoff with full
 * jitter and the time budget that bounds retries; and s3_perform, the
 * blocking retry loop of the tools. */
#include "s3_private.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "log.h"
#include "s3_op.h"
#include "s3_reach.h"
#include "s3_response.h"
#include "s3_result.h"
#include "s3_xml.h"


static bool code_is(const char *code, const char *const *set)
{
	for (; *set; set++)
		if (strcmp(code, *set) == 0)
			return true;
	return false;
}

static const char *const auth_codes[] = {
	"SignatureDoesNotMatch", "InvalidAccessKeyId", "ExpiredToken",
	"InvalidToken", "TokenRefreshRequired", "RequestTimeTooSkewed",
	"AuthorizationHeaderMalformed", "InvalidSecurity", NULL,
};
/* Credentials that were good and ran out: a refresh, not a new key. */
static const char *const expired_codes[] = {
	"ExpiredToken", "TokenRefreshRequired", NULL,
};
static const char *const retry_codes[] = {
	"SlowDown", "InternalError", "RequestTimeout", "ServiceUnavailable",
	"Throttling", "ThrottlingException", NULL,
};

/* Write-path codes with their own errno: a corrupted body, and requests
 * that are wrong however often they are sent. */
static const char *const digest_codes[] = {
	"BadDigest", "InvalidDigest", "XAmzContentSHA256Mismatch", NULL,
};
static const char *const bad_request_codes[] = {
	"InvalidPart", "InvalidPartOrder", "EntityTooSmall", "EntityTooLarge",
	"MalformedXML", "InvalidArgument", "InvalidRequest", NULL,
};

static bool curl_code_retryable(CURLcode code)
{
	switch (code) {
	case CURLE_COULDNT_RESOLVE_HOST: /* a DNS outage is an outage */
	case CURLE_COULDNT_CONNECT:
	case CURLE_RECV_ERROR:
	case CURLE_SEND_ERROR:
	case CURLE_OPERATION_TIMEDOUT:
	case CURLE_PARTIAL_FILE:
	case CURLE_GOT_NOTHING:
	case CURLE_WRITE_ERROR:
	case CURLE_SSL_CONNECT_ERROR:
	case CURLE_HTTP2:
	case CURLE_HTTP2_STREAM:
		return true;
	default:
		return false;
	}
}

/* Why no answer came, as the errno a user recognises: a name that does
 * not resolve (-ENXIO), a connection refused or unreachable (the
 * socket's own errno), else -EIO. */
static int curl_code_errno(const struct s3_req *r, CURLcode code)
{
	long os_errno = 0;
	switch (code) {
	case CURLE_COULDNT_RESOLVE_HOST:
	case CURLE_COULDNT_RESOLVE_PROXY:
		return -ENXIO;
	case CURLE_COULDNT_CONNECT:
		curl_easy_getinfo(r->easy, CURLINFO_OS_ERRNO, &os_errno);
		if (os_errno == EHOSTUNREACH || os_errno == ENETUNREACH ||
		    os_errno == ETIMEDOUT)
			return -(int)os_errno;
		return -ECONNREFUSED;
	default:
		return -EIO;
	}
}

static void classify_curl_error(const struct s3_req *r, CURLcode code,
				struct s3_result *out)
{
	out->err = -EIO;
	switch (r->abort) {
	case ABORT_SINK:
		out->retryable = true;
		snprintf(out->message, sizeof(out->message),
			 "transfer aborted by the receiver");
		return;
	case ABORT_OVERRUN:
		out->err = -EPROTO; /* a server that ignores ranges: no retry */
		snprintf(out->message, sizeof(out->message),
			 "server sent more than the %" PRIu64 " bytes asked for",
			 r->range_len);
		return;
	case ABORT_BAD_RANGE:
		out->err = -EPROTO;
		snprintf(out->message, sizeof(out->message),
			 "server answered a different range than bytes=%" PRIu64 "-",
			 r->range_off);
		return;
	case ABORT_TOO_LARGE:
		out->err = -EPROTO;
		snprintf(out->message, sizeof(out->message),
			 "response body larger than %zu bytes", s3_resp_body_cap(r));
		return;
	case ABORT_NOMEM:
		out->err = -ENOMEM;
		snprintf(out->message, sizeof(out->message),
			 "out of memory receiving the response");
		return;
	case ABORT_NONE:
		break;
	}
	out->retryable = curl_code_retryable(code);
	out->err = curl_code_errno(r, code);
	snprintf(out->message, sizeof(out->message), "%s",
		 r->errbuf[0] ? r->errbuf : curl_easy_strerror(code));
}

/* The body length a 2xx GET must have delivered, or false if unknown. */
static bool expected_get_length(const struct s3_req *r, uint64_t *want)
{
	if (r->status == 206 && r->have_range) {
		uint64_t n = r->range_last - r->range_first + 1;
		if (r->range_len && n > r->range_len)
			n = r->range_len;
		*want = n;
		return true;
	}
	if (r->have_length) {
		*want = r->content_length;
		return true;
	}
	return false;
}

static void protocol_error(struct s3_result *out, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static void protocol_error(struct s3_result *out, const char *fmt, ...)
{
	va_list ap;
	out->err = -EPROTO;
	out->retryable = false;
	va_start(ap, fmt);
	vsnprintf(out->message, sizeof(out->message), fmt, ap);
	va_end(ap);
}

/* A 206 must describe exactly the range asked for (clamped at the end of
 * the object it names) and agree with its own Content-Length: the bytes
 * go to a cache slot sized from that range. */
static bool range_reply_ok(const struct s3_req *r, struct s3_result *out)
{
	if (!r->have_range) {
		protocol_error(out, "206 without a usable Content-Range");
		return false;
	}
	if (!r->range_total_known || r->range_total == 0) {
		protocol_error(out, "Content-Range without the object's size");
		return false;
	}
	uint64_t last = r->range_off + r->range_len - 1;
	if (last >= r->range_total)
		last = r->range_total - 1;
	if (r->range_first != r->range_off || r->range_last != last) {
		protocol_error(out, "Content-Range bytes %" PRIu64 "-%" PRIu64
			       "/%" PRIu64 " for a request of bytes=%" PRIu64
			       "-%" PRIu64, r->range_first, r->range_last,
			       r->range_total, r->range_off,
			       r->range_off + r->range_len - 1);
		return false;
	}
	if (r->have_length && r->content_length != last - r->range_first + 1) {
		protocol_error(out, "Content-Length %" PRIu64 " disagrees with "
			       "Content-Range bytes %" PRIu64 "-%" PRIu64,
			       r->content_length, r->range_first, r->range_last);
		return false;
	}
	return true;
}

static void classify_success(const struct s3_req *r, struct s3_result *out)
{
	uint64_t want;

	if ((r->op == S3_HEAD_OBJECT || r->op == S3_GET_OBJECT) &&
	    r->etag_too_long) {
		protocol_error(out, "ETag longer than %zu bytes",
			       sizeof(r->etag) - 1);
		return;
	}
	if (r->op == S3_HEAD_OBJECT) {
		if (!r->have_length)
			protocol_error(out, "HEAD without a Content-Length");
		out->object_size = r->content_length;
	}
	if (r->op != S3_GET_OBJECT)
		return;
	out->object_size = r->status == 206 && r->range_total_known ?
		r->range_total : r->content_length;
	if (r->range_len && r->status == 206 && !range_reply_ok(r, out))
		return;
	if (r->range_len && r->status != 206 && r->have_length &&
	    r->content_length > r->range_len) {
		protocol_error(out, "%" PRIu64 " bytes for a range of %" PRIu64,
			       r->content_length, r->range_len);
		return;
	}
	/* What the server promised (Content-Range or Content-Length) must
	 * all have arrived; less is a cut connection, worth a retry. */
	if (expected_get_length(r, &want) && r->body_bytes > want) {
		protocol_error(out, "%" PRIu64 " body bytes where %" PRIu64
			       " were promised", r->body_bytes, want);
		return;
	}
	if (expected_get_length(r, &want) && r->body_bytes != want) {
		out->err = -EIO;
		out->retryable = true;
		snprintf(out->message, sizeof(out->message),
			 "short body: %" PRIu64 " of %" PRIu64 " bytes",
			 r->body_bytes, want);
	}
}

static void classify_status(enum s3_op op, long status, struct s3_result *out)
{
	const char *code = out->code;

	if (s3_op_writes(op) && code_is(code, digest_codes)) {
		out->err = -EBADMSG;
	} else if (s3_op_writes(op) && code_is(code, bad_request_codes)) {
		out->err = -EINVAL;
	} else if (status == 404 && (op == S3_HEAD_BUCKET ||
				     !strcmp(code, "NoSuchBucket"))) {
		out->err = -ENODEV;
	} else if (status == 404) {
		out->err = -ENOENT;
	} else if ((status == 403 || status == 400) &&
		   code_is(code, expired_codes)) {
		out->err = -EKEYEXPIRED;
	} else if ((status == 403 || status == 400) && code_is(code, auth_codes)) {
		out->err = -EKEYREJECTED;
	} else if (status == 403) {
		out->err = -EPERM;
	} else if (status == 412) {
		out->err = -ESTALE;
	} else if (status == 416) {
		out->err = -ERANGE;
	} else {
		out->err = -EIO;
		out->retryable = status == 500 || status == 502 ||
				 status == 503 || status == 504 ||
				 status == 429 || code_is(code, retry_codes);
	}
}

/* Code and message from the error body; the status alone when there is
 * none (HEAD) or it is not S3 XML (a proxy's HTML page). */
static void fill_error_text(const struct s3_req *r, struct s3_result *out)
{
	char msg[sizeof(out->message)] = "";

	if (r->buf_len == 0) {
		snprintf(out->message, sizeof(out->message), "HTTP %ld", r->status);
		return;
	}
	if (s3_parse_error(r->buf, r->buf_len, out->code, sizeof(out->code),
			   msg, sizeof(msg)) < 0) {
		out->code[0] = '\0';
		snprintf(out->message, sizeof(out->message),
			 "HTTP %ld with a malformed error body", r->status);
		return;
	}
	snprintf(out->message, sizeof(out->message), "%s", msg);
}

const char *s3_result_reason(const struct s3_result *r, char *buf, size_t len)
{
	char status[32] = "";
	if (r->http_status)
		snprintf(status, sizeof(status), "HTTP %ld", r->http_status);
	const char *msg = r->message;
	/* fill_error_text's stand-ins say nothing the status does not. */
	if (!strcmp(msg, status) || !strcmp(msg, r->code))
		msg = "";
	if (r->code[0] && msg[0])
		snprintf(buf, len, "%s: %s (%s)", rc_esc(r->code), rc_esc(msg),
			 status[0] ? status : "no response");
	else if (r->code[0] || msg[0])
		snprintf(buf, len, "%s%s%s%s", rc_esc(r->code[0] ? r->code : msg),
			 status[0] ? " (" : "", status, status[0] ? ")" : "");
	else
		snprintf(buf, len, "%s", status[0] ? status : "no response");
	return buf;
}

/* CompleteMultipartUpload and the copies send 200 before they finish and
 * report a late failure as an <Error> document in that 200. True (code
 * and message filled) when this body is one. */
static bool error_in_200(const struct s3_req *r, struct s3_result *out)
{
	char msg[sizeof(out->message) - 32] = "";

	if ((r->op != S3_COMPLETE_MULTIPART && r->op != S3_COPY_OBJECT &&
	     r->op != S3_UPLOAD_PART_COPY) ||
	    r->buf_len == 0)
		return false;
	if (s3_parse_error(r->buf, r->buf_len, out->code, sizeof(out->code),
			   msg, sizeof(msg)) < 0 || !out->code[0]) {
		out->code[0] = '\0';
		return false;
	}
	snprintf(out->message, sizeof(out->message), "%s (in a 200 response)",
		 msg[0] ? msg : out->code);
	return true;
}

static void classify(struct s3_req *r, CURLcode code, struct s3_result *out)
{
	memset(out, 0, sizeof(*out));
	out->curl_code = code;
	out->body_bytes = r->body_bytes;
	out->content_length = r->content_length;
	snprintf(out->etag, sizeof(out->etag), "%s", r->etag);
	snprintf(out->upload_token, sizeof(out->upload_token), "%s",
		 r->upload_token);
	if (curl_easy_getinfo(r->easy, CURLINFO_RESPONSE_CODE,
			      &out->http_status) != CURLE_OK)
		out->http_status = r->status;

	if (code != CURLE_OK) {
		classify_curl_error(r, code, out);
		return;
	}
	if (s3_is_2xx(out->http_status) && !error_in_200(r, out)) {
		classify_success(r, out);
		return;
	}
	if (!out->code[0])
		fill_error_text(r, out);
	classify_status(r->op, out->http_status, out);
}

void s3_req_result(struct s3_req *r, CURLcode code, struct s3_result *out)
{
	classify(r, code, out);
	s3_reach_note(r->c, out->http_status, (int)out->curl_code,
		      out->message);
}

/* ---- blocking loop and backoff ------------------------------------------ */

/* xorshift64*, one state per thread: jitter needs spread, not secrecy. */
static uint64_t jitter_random(void)
{
	static __thread uint64_t state;
	if (!state) {
		state = (rc_now_ns() << 20) ^ ((uint64_t)getpid() << 40) ^
			(uint64_t)(uintptr_t)&state;
		if (!state)
			state = 0x9e3779b97f4a7c15ULL;
	}
	state ^= state >> 12;
	state ^= state << 25;
	state ^= state >> 27;
	return state * 0x2545f4914f6cdd1dULL;
}

/* Full jitter (uniform in [0, min(cap, base * 2^(attempt-1))]): clients
 * that failed together spread out instead of retrying in lockstep. */
unsigned s3_backoff_ms(const struct s3_client *c, unsigned attempt)
{
	uint64_t cap = c->cfg.backoff_cap_ms, ceiling = c->cfg.backoff_base_ms;

	if (attempt == 0)
		attempt = 1;
	for (unsigned i = 1; i < attempt && ceiling < cap; i++)
		ceiling *= 2;
	if (ceiling > cap)
		ceiling = cap;
	return (unsigned)(jitter_random() % (ceiling + 1));
}

bool s3_retry_next(const struct s3_client *c, bool retryable,
		   unsigned retries, uint64_t spent_ms, unsigned budget_ms,
		   unsigned *delay_ms)
{
	if (!retryable || retries >= c->cfg.max_retries ||
	    spent_ms >= budget_ms)
		return false;
	unsigned d = s3_backoff_ms(c, retries + 1);
	/* A wait past the budget's end becomes one last try at its end:
	 * an outage that ends just inside the budget is still caught. */
	if (spent_ms + d > budget_ms)
		d = (unsigned)(budget_ms - spent_ms);
	*delay_ms = d;
	return true;
}

static void sleep_ms(unsigned ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

static void take_body(const struct s3_req *r, char **body_out, size_t *body_len)
{
	if (!body_out)
		return;
	free(*body_out);
	*body_out = malloc(r->buf_len + 1);
	if (!*body_out)
		return;
	memcpy(*body_out, r->buf ? r->buf : "", r->buf_len);
	(*body_out)[r->buf_len] = '\0';
	if (body_len)
		*body_len = r->buf_len;
}

int s3_perform(struct s3_client *c, const struct s3_req_params *p,
	       struct s3_result *res, char **body_out, size_t *body_len)
{
	if (body_out)
		*body_out = NULL;
	if (body_len)
		*body_len = 0;
	uint64_t first_ns = rc_now_ns();
	for (unsigned attempt = 0;; attempt++) {
		char err[256] = "";
		unsigned delay;
		struct s3_req *r = s3_req_new(c, p, err, sizeof(err));
		if (!r) {
			memset(res, 0, sizeof(*res));
			res->err = errno ? -errno : -EINVAL;
			snprintf(res->message, sizeof(res->message), "%s", err);
			return res->err;
		}
		CURLcode code = curl_easy_perform(r->easy);
		s3_req_result(r, code, res);
		take_body(r, body_out, body_len);
		s3_req_free(r);
		if (!s3_retry_next(c, res->retryable, attempt,
				   (rc_now_ns() - first_ns) / 1000000u,
				   c->cfg.retry_budget_ms, &delay))
			return res->err;
		sleep_ms(delay);
	}
}

