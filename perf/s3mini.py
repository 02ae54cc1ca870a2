#!/usr/bin/env python3
"""s3mini.py - a minimal in-memory S3 endpoint for machines where Ceph RGW
cannot be installed (the lent GPU machine has no package registry), so that
perf/gpubench.sh can run a real daemon there. Path-style only; accepts any
signature; CreateBucket, PutObject, HeadObject, GetObject (Range, If-Match)
and ListObjectsV2 (prefix, delimiter, max-keys, continuation-token). It is
not a test fixture: the test suite talks to RGW.

usage: s3mini.py PORT   (prints "ready" once listening on 127.0.0.1:PORT)
"""
import hashlib
import http.server
import sys
import threading
import urllib.parse
from email.utils import formatdate
from xml.sax.saxutils import escape

OBJECTS = {}  # "bucket/key" -> (bytes, etag)
LOCK = threading.Lock()


def split_path(path):
    parsed = urllib.parse.urlsplit(path)
    bucket, _, key = urllib.parse.unquote(parsed.path).lstrip("/").partition("/")
    return bucket, key, urllib.parse.parse_qs(parsed.query, keep_blank_values=True)


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def reply(self, code, body=b"", headers=(), send_body=True):
        self.send_response(code)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if send_body and body:
            self.wfile.write(body)

    def error(self, code, s3code, send_body=True):
        body = f"<Error><Code>{s3code}</Code></Error>".encode()
        self.reply(code, body, [("Content-Type", "application/xml")], send_body)

    def do_PUT(self):
        bucket, key, _ = split_path(self.path)
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if not key:
            return self.reply(200)
        etag = '"%s"' % hashlib.md5(body).hexdigest()
        with LOCK:
            OBJECTS[bucket + "/" + key] = (body, etag)
        self.reply(200, headers=[("ETag", etag)])

    def object(self):
        bucket, key, query = split_path(self.path)
        with LOCK:
            return bucket, key, query, OBJECTS.get(bucket + "/" + key)

    def do_HEAD(self):
        _, _, _, obj = self.object()
        if obj is None:
            return self.error(404, "NoSuchKey", send_body=False)
        self.send_response(200)
        self.send_header("Content-Length", str(len(obj[0])))
        self.send_header("ETag", obj[1])
        self.send_header("Last-Modified", formatdate(usegmt=True))
        self.end_headers()

    def do_GET(self):
        bucket, key, query, obj = self.object()
        if not key:
            return self.list_objects(bucket, query)
        if obj is None:
            return self.error(404, "NoSuchKey")
        data, etag = obj
        want = self.headers.get("If-Match")
        if want and want != etag:
            return self.error(412, "PreconditionFailed")
        rng = self.headers.get("Range")
        if not rng:
            return self.reply(200, data, [("ETag", etag)])
        first, _, last = rng.removeprefix("bytes=").partition("-")
        first = int(first)
        last = min(int(last) if last else len(data) - 1, len(data) - 1)
        if first >= len(data):
            return self.error(416, "InvalidRange")
        self.reply(206, data[first:last + 1], [
            ("ETag", etag),
            ("Content-Range", f"bytes {first}-{last}/{len(data)}")])

    def list_objects(self, bucket, query):
        arg = lambda name, default="": query.get(name, [default])[0]
        prefix, delimiter = arg("prefix"), arg("delimiter")
        max_keys = int(arg("max-keys", "1000"))
        start = arg("continuation-token") or arg("start-after")
        with LOCK:
            keys = sorted(k.partition("/")[2] for k in OBJECTS
                          if k.startswith(bucket + "/"))
        contents, prefixes, truncated, last = [], [], False, ""
        for key in keys:
            if not key.startswith(prefix) or key <= start:
                continue
            if len(contents) + len(prefixes) == max_keys:
                truncated = True
                break
            rest = key[len(prefix):]
            if delimiter and delimiter in rest:
                common = prefix + rest.split(delimiter)[0] + delimiter
                if not prefixes or prefixes[-1] != common:
                    prefixes.append(common)
                last = common + "\uffff"
                continue
            data, etag = OBJECTS[bucket + "/" + key]
            contents.append(f"<Contents><Key>{escape(key)}</Key><Size>{len(data)}"
                            f"</Size><ETag>{escape(etag)}</ETag></Contents>")
            last = key
        body = ("<?xml version=\"1.0\"?><ListBucketResult>"
                f"<Name>{escape(bucket)}</Name><Prefix>{escape(prefix)}</Prefix>"
                f"<KeyCount>{len(contents) + len(prefixes)}</KeyCount>"
                f"<IsTruncated>{'true' if truncated else 'false'}</IsTruncated>"
                + (f"<NextContinuationToken>{escape(last)}</NextContinuationToken>"
                   if truncated else "")
                + "".join(contents)
                + "".join(f"<CommonPrefixes><Prefix>{escape(p)}</Prefix></CommonPrefixes>"
                          for p in prefixes)
                + "</ListBucketResult>")
        self.reply(200, body.encode(), [("Content-Type", "application/xml")])


def main():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler)
    server.daemon_threads = True
    print("ready", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
