#!/usr/bin/env python3
"""API Gateway (REST proxy) events for the cold-start runs of bench/run.

Usage: python3 bench/events.py OUTDIR [COUNT]

Writes OUTDIR/render_415.json (a truncated replay: the request ends at validation, no network),
OUTDIR/health.json (GET /health: every dependency is checked), and COUNT events
OUTDIR/render_202_N.json (a valid replay, each from its own source IP, so each is admitted).
"""

import base64
import json
import sys
from pathlib import Path

FIXTURES = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "replays"
BOUNDARY = "osurender-cold-start"


def event(method, path, source_ip, body=b"", content_type=None):
    headers = {"Host": "example.execute-api.us-east-1.amazonaws.com"}
    if content_type:
        headers["Content-Type"] = content_type
    return {
        "resource": path, "path": path, "httpMethod": method,
        "headers": headers, "multiValueHeaders": {k: [v] for k, v in headers.items()},
        "queryStringParameters": None, "multiValueQueryStringParameters": None,
        "pathParameters": None, "stageVariables": None,
        "body": base64.b64encode(body).decode() if body else None,
        "isBase64Encoded": bool(body),
        "requestContext": {
            "resourcePath": path, "httpMethod": method, "path": f"/v1{path}", "stage": "v1",
            "requestId": "c6af9ac6-7b61-11e6-9a41-93e8deadbeef", "accountId": "123456789012",
            "apiId": "example", "protocol": "HTTP/1.1", "requestTimeEpoch": 1700000000000,
            "identity": {"sourceIp": source_ip, "userAgent": "bench"},
        },
    }


def render_event(replay_name, source_ip):
    replay = (FIXTURES / replay_name).read_bytes()
    body = (f"--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"replay\"; "
            f"filename=\"play.osr\"\r\nContent-Type: application/octet-stream\r\n\r\n").encode()
    body += replay + f"\r\n--{BOUNDARY}--\r\n".encode()
    return event("POST", "/v1/render", source_ip, body,
                 f"multipart/form-data; boundary={BOUNDARY}")


def main():
    out = Path(sys.argv[1])
    count = int(sys.argv[2]) if len(sys.argv) > 2 else 20
    out.mkdir(parents=True, exist_ok=True)
    write = lambda name, e: (out / name).write_text(json.dumps(e))  # noqa: E731
    write("render_415.json", render_event("corrupt_truncated.osr", "198.51.100.7"))
    write("health.json", event("GET", "/health", "198.51.100.7"))
    for n in range(count):
        write(f"render_202_{n}.json", render_event("valid_0.osr", f"203.0.113.{n + 1}"))


if __name__ == "__main__":
    main()
