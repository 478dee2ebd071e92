"""moto's server (the AWS stand-in on 127.0.0.1:4566), with DynamoDB's per-item atomicity.

DynamoDB applies a conditional write atomically: the rate limiter's
`ADD hits :one ... IF hits < :limit` can never let two requests take the last slot. moto's
threaded server evaluates the condition and writes the item without a lock, so under
concurrency two increments can both pass (a storm of skin uploads once got 5 through a limit
of 4). This serializes DynamoDB requests, restoring the guarantee the limiter relies on on AWS;
S3 and SQS requests stay concurrent. Otherwise it is `moto_server -H HOST -p PORT`.
"""

import argparse
import os
import threading

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


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-H", "--host", default="127.0.0.1")
    parser.add_argument("-p", "--port", type=int, default=4566)
    args = parser.parse_args()
    # moto builds the URLs it returns (SQS queue URLs, presigned posts) from this.
    os.environ.setdefault("MOTO_PORT", str(args.port))
    app = DomainDispatcherApplication(create_backend_app)
    run_simple(args.host, args.port, SerializedDynamoDB(app), threaded=True,
               request_handler=MotoRequestHandler)


if __name__ == "__main__":
    main()
