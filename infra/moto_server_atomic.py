"""moto's server (the AWS stand-in on 127.0.0.1:4566), with DynamoDB's per-item atomicity.

DynamoDB applies a conditional write atomically: the rate limiter's
`ADD hits :one ... IF hits < :limit` can never let two requests take the last slot. moto's
threaded server evaluates the condition and writes the item without a lock, so under
concurrency two increments can both pass (a storm of skin uploads once got 5 through a limit
of 4). This serializes DynamoDB requests, restoring the guarantee the limiter relies on on AWS;
S3 and SQS requests stay concurrent.

S3's CopyObject refuses with 412 when `x-amz-copy-source-if-match` names another ETag than the
source's, or when `If-None-Match: *` finds the destination key taken (AWS's CopyObject
reference); moto ignores both headers, so a skin upload replaced while it was checked, or copied
onto another's skin, would be copied anyway. `ConditionalCopy` adds both checks (the skin store's
contract suite tests them; path-style requests, as the SDK sends them to the stand-in). Otherwise it is `moto_server -H HOST -p PORT`.
"""

import argparse
import os
import threading
from urllib.parse import unquote

from moto.moto_server.werkzeug_app import (
    DomainDispatcherApplication,
    MotoRequestHandler,
    create_backend_app,
)
from werkzeug.serving import run_simple


class SerializedDynamoDB:
    """WSGI middleware: one DynamoDB request at a time (they carry `X-Amz-Target:
    DynamoDB_20120810.<Operation>`); the response is read inside the lock."""

    def __init__(self, app):
        self.app = app
        self.lock = threading.Lock()

    def __call__(self, environ, start_response):
        if environ.get("HTTP_X_AMZ_TARGET", "").startswith("DynamoDB"):
            with self.lock:
                return list(self.app(environ, start_response))
        return self.app(environ, start_response)


class ConditionalCopy:
    """WSGI middleware: a CopyObject whose source's ETag is not `x-amz-copy-source-if-match`, or
    whose destination exists under `If-None-Match: *`, answers 412 PreconditionFailed, as S3
    does."""

    def __init__(self, app):
        self.app = app

    def __call__(self, environ, start_response):
        expected = environ.get("HTTP_X_AMZ_COPY_SOURCE_IF_MATCH")
        source = environ.get("HTTP_X_AMZ_COPY_SOURCE")
        if environ.get("REQUEST_METHOD") == "PUT" and source:
            etag = self.etag_of(source)
            moved = expected and etag is not None and etag.strip('"') != expected.strip('"')
            taken = (environ.get("HTTP_IF_NONE_MATCH") == "*"
                     and self.etag_of(environ.get("PATH_INFO", "")) is not None)
            if moved or taken:
                body = (b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>PreconditionFailed'
                        b"</Code><Message>At least one of the pre-conditions you specified did"
                        b" not hold</Message></Error>")
                start_response("412 Precondition Failed", [
                    ("Content-Type", "application/xml"), ("Content-Length", str(len(body)))])
                return [body]
        return self.app(environ, start_response)

    @staticmethod
    def etag_of(path):
        """The ETag of the object at `/bucket/key` (URL-encoded), or None if there is none."""
        from moto.core import DEFAULT_ACCOUNT_ID
        from moto.s3.models import s3_backends

        bucket, _, key = unquote(path.split("?", 1)[0]).lstrip("/").partition("/")
        try:
            return s3_backends[DEFAULT_ACCOUNT_ID]["aws"].get_object(bucket, key).etag
        except Exception:  # no such object (a missing source is moto's to answer: 404)
            return None


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-H", "--host", default="127.0.0.1")
    parser.add_argument("-p", "--port", type=int, default=4566)
    args = parser.parse_args()
    # moto builds the URLs it returns (SQS queue URLs, presigned posts) from this.
    os.environ.setdefault("MOTO_PORT", str(args.port))
    app = DomainDispatcherApplication(create_backend_app)
    run_simple(args.host, args.port, ConditionalCopy(SerializedDynamoDB(app)), threaded=True,
               request_handler=MotoRequestHandler)


if __name__ == "__main__":
    main()
