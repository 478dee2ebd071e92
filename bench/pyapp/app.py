"""POST /v1/render as the seed design built it in Python, for bench/run to load side by side with
the Rust service: FastAPI, SlowApi limits in Redis, asyncpg, osrparse, aioboto3 for S3 and SQS.

Written for the benchmark only (not a product): it does the same work per admitted request as
the Rust function, in the seed design's order and style, on the same database schema (the Rust
migrations'), the same bucket and the same queue:

  SlowApi rate limit (Redis, checked before the handler runs) -> read the upload -> osrparse ->
  std mode -> skin and options -> unlocked queue/render counts -> transaction { per-IP advisory
  lock, active-job count, insert job + outbox event, upload the replay to S3 } -> commit ->
  publish the event to SQS and mark it dispatched.

Configuration is the Rust service's variable names (bench/run sets them): DATABASE_URL,
AWS_ENDPOINT_URL, REPLAY_BUCKET, RENDER_QUEUE_NAME, RATE_LIMIT_RENDER, MAX_QUEUED, MAX_RENDERING,
MAX_ACTIVE_JOBS_PER_IP, MAX_REPLAY_BYTES, DB_POOL_SIZE; plus REDIS_URL.
Run: uvicorn app:app --app-dir bench/pyapp --loop uvloop --http httptools --no-access-log
"""

import contextlib
import hashlib
import json
import os
import re
import uuid

import aioboto3
import asyncpg
from fastapi import FastAPI, File, Form, Request, UploadFile
from fastapi.responses import JSONResponse
from osrparse import GameMode, Replay
from slowapi import Limiter
from slowapi.errors import RateLimitExceeded

ENV = os.environ
MAX_QUEUED = int(ENV.get("MAX_QUEUED", "100"))
MAX_RENDERING = int(ENV.get("MAX_RENDERING", "20"))
MAX_ACTIVE_JOBS_PER_IP = int(ENV.get("MAX_ACTIVE_JOBS_PER_IP", "2"))
MAX_REPLAY_BYTES = int(ENV.get("MAX_REPLAY_BYTES", str(4 * 1024 * 1024)))
BUCKET = ENV.get("REPLAY_BUCKET", "osurender-replays")
SKIN = re.compile(r"[A-Za-z0-9_ -]{1,128}")
RESOLUTIONS = {"720p", "1080p", "1440p", "4k"}
FLAGS = ("motion_blur", "storyboard", "video", "snaking_in", "snaking_out", "hit_error_meter",
         "key_overlay")
ACTIVE = "('queued', 'downloading', 'rendering')"


def client_ip(request: Request) -> str:
    """CF-Connecting-IP from a loopback peer (the load generator stands in for Cloudflare)."""
    peer = request.client.host if request.client else ""
    forwarded = request.headers.get("cf-connecting-ip")
    return forwarded if forwarded and peer.startswith("127.") else peer


def lock_id(ip: str) -> int:
    return int.from_bytes(hashlib.sha256(ip.encode()).digest()[:8], "little", signed=True)


def problem(status: int, code: str, detail: str) -> JSONResponse:
    body = {"type": "about:blank", "title": code, "status": status, "detail": detail, "code": code}
    return JSONResponse(body, status_code=status, media_type="application/problem+json")


limiter = Limiter(key_func=client_ip, storage_uri=ENV.get("REDIS_URL", "redis://127.0.0.1:6379"))


@contextlib.asynccontextmanager
async def lifespan(app: FastAPI):
    size = int(ENV.get("DB_POOL_SIZE", "2"))
    app.state.pool = await asyncpg.create_pool(ENV["DATABASE_URL"], min_size=size, max_size=size)
    session = aioboto3.Session(region_name=ENV.get("AWS_REGION", "us-east-1"))
    endpoint = ENV.get("AWS_ENDPOINT_URL")
    async with session.client("s3", endpoint_url=endpoint) as s3, \
            session.client("sqs", endpoint_url=endpoint) as sqs:
        app.state.s3, app.state.sqs = s3, sqs
        name = ENV.get("RENDER_QUEUE_NAME", "osurender-render-jobs")
        app.state.queue_url = (await sqs.get_queue_url(QueueName=name))["QueueUrl"]
        yield
    await app.state.pool.close()


app = FastAPI(lifespan=lifespan)
app.state.limiter = limiter


@app.exception_handler(RateLimitExceeded)
async def rate_limited(request: Request, exc: RateLimitExceeded):
    return problem(429, "rate_limited", f"Rate limit exceeded: {exc.detail}")


@app.post("/v1/render")
@limiter.limit(ENV.get("RATE_LIMIT_RENDER", "5/minute"))
async def render(
    request: Request,
    replay: UploadFile | None = File(None),
    skin: str = Form("Default"),
    resolution: str = Form("1080p"),
    bg_dim: float = Form(0.95),
):
    if replay is None or not (replay.filename or "").lower().endswith(".osr"):
        return problem(400, "invalid_file", "the form needs a `replay` file ending in .osr")
    data = await replay.read()
    if not data:
        return problem(400, "invalid_file", "the replay file is empty")
    if len(data) > MAX_REPLAY_BYTES:
        return problem(413, "file_too_large", f"the replay is larger than {MAX_REPLAY_BYTES} bytes")
    try:
        parsed = Replay.from_string(data)
    except Exception as error:  # osrparse raises whatever the bytes provoke
        return problem(415, "invalid_replay", f"not a valid osu! replay: {error!r}")
    if parsed.mode != GameMode.STD:
        return problem(415, "invalid_replay", "only osu!standard replays can be rendered")
    if not SKIN.fullmatch(skin) or resolution not in RESOLUTIONS or not 0 <= bg_dim <= 1:
        return problem(422, "invalid_field", "invalid skin or render option")
    form = await request.form()
    config = {"skin": skin, "resolution": resolution, "bg_dim": bg_dim}
    config.update({flag: form.get(flag, "false") == "true" for flag in FLAGS})

    ip = client_ip(request)
    job_id = uuid.uuid4()
    replay_key = f"replays/{job_id}.osr"
    payload = json.dumps({"job_id": str(job_id), "replay_key": replay_key, "skin": skin,
                          "config": config})
    async with request.app.state.pool.acquire() as conn:
        queued, rendering = await conn.fetchrow(
            "SELECT count(*) FILTER (WHERE status = 'queued'),"
            f" count(*) FILTER (WHERE status IN ('downloading', 'rendering'))"
            f" FROM jobs WHERE status IN {ACTIVE}")
        if queued >= MAX_QUEUED:
            return problem(503, "queue_full", "the render queue is full")
        if rendering >= MAX_RENDERING:
            return problem(503, "render_capacity", "all renderers are busy")
        async with conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock($1)", lock_id(ip))
            active = await conn.fetchval(
                f"SELECT count(*) FROM jobs WHERE client_ip = $1 AND status IN {ACTIVE}", ip)
            if active >= MAX_ACTIVE_JOBS_PER_IP:
                return problem(429, "too_many_active_jobs", "too many active jobs")
            await conn.execute(
                "INSERT INTO jobs (id, client_ip, skin, config, replay_key)"
                " VALUES ($1, $2, $3, $4::jsonb, $5)",
                job_id, ip, skin, json.dumps(config), replay_key)
            event_id = await conn.fetchval(
                "INSERT INTO outbox_events (job_id, event_type, payload)"
                " VALUES ($1, 'render_job_created', $2::jsonb) RETURNING id", job_id, payload)
            await request.app.state.s3.put_object(Bucket=BUCKET, Key=replay_key, Body=data)
        await request.app.state.sqs.send_message(
            QueueUrl=request.app.state.queue_url,
            MessageBody=json.dumps({"event_id": event_id, "event_type": "render_job_created",
                                    "job_id": str(job_id), "payload": json.loads(payload)}))
        await conn.execute(
            "UPDATE outbox_events SET status = 'dispatched', dispatched_at = now() WHERE id = $1",
            event_id)
    location = f"/v1/jobs/{job_id}"
    return JSONResponse({"job_id": str(job_id), "status": "queued", "links": {"status": location}},
                        status_code=202, headers={"Location": location})
