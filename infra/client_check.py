"""What a bot author does with a client generated from openapi.yaml (infra/client-check runs it
against the dev server, with the generated `osurender_client` installed): every request and
every parse goes through that client alone. Any step that fails ends the run with exit 1.

Environment: OSR_URL (the server), OSR_API_KEY (a live key made for the run), OSR_SANDBOX_KEY
(a sandbox key), OSR_REPLAYS (tests/fixtures/replays). The server allows private callbacks
(ALLOW_PRIVATE_CALLBACKS=true) so the bot's flow can use a loopback receiver and replay host.
"""

import http.server
import io
import json
import os
import sys
import threading
import time
import typing
import zipfile
from pathlib import Path

import attrs
import httpx  # the generated client's own dependency: only for its timeout

from osurender_client import AuthenticatedClient, Client
from osurender_client.api.jobs import get_job, get_job_thumbnail, get_job_video, list_jobs
from osurender_client.api.operations import get_status, health
from osurender_client.api.renders import submit_render
from osurender_client.api.skins import list_skins, upload_skin, upload_skin_legacy
from osurender_client.models import (
    Admitted,
    Health,
    HealthStatus,
    Job,
    JobCallback,
    JobStatus,
    ListJobsResponse200,
    ListSkinsResponse200,
    PresignedUpload,
    Problem,
    RenderOptions,
    RenderOptionsResolution,
    ServiceStatus,
    SkinForm,
    SubmitRenderBody,
    SubmitRenderBodyResolution,
    SubmitRenderBodySandboxOutcome,
    UploadSkinJsonBody,
    UploadSkinResponse201,
)
from osurender_client.types import UNSET, File, Unset

URL = os.environ["OSR_URL"]
KEY = os.environ["OSR_API_KEY"]
SANDBOX_KEY = os.environ["OSR_SANDBOX_KEY"]
REPLAYS = Path(os.environ["OSR_REPLAYS"])
TIMEOUT = httpx.Timeout(30.0)

# The names options had before o!rdr's, shown in `config` for one release.
LEGACY = {"bg_dim", "motion_blur", "storyboard", "video", "snaking_in", "snaking_out", "hit_error_meter", "key_overlay"}
# The render options of the form, as RenderOptions (a job's `config`) names them: every one the
# generated model has, but the legacy names.
OPTIONS = tuple(
    field.name for field in attrs.fields(RenderOptions) if field.name not in LEGACY | {"additional_properties"}
)
# The resolution has no default in the spec: the server picks it (a key's highest when lower).
CHOSEN_BY_SERVER = {"resolution"}


def link(path):
    """A path as the server links it: absolute (PUBLIC_BASE_URL; the dev server's own)."""
    return f"{URL}{path}"


class CheckFailed(Exception):
    pass


def check(condition, what):
    if not condition:
        raise CheckFailed(what)


def replay(name, file_name=None):
    """A fixture as the generated client's File: a binary part with a file name."""
    return File(
        payload=io.BytesIO((REPLAYS / name).read_bytes()),
        file_name=file_name or name,
        mime_type="application/octet-stream",
    )


def plain(value):
    """An option's value as JSON has it (an enum member as its value)."""
    return getattr(value, "value", value)


def problem(response, status, code):
    """The answer is a problem document, parsed, with this status and code."""
    parsed = response.parsed
    check(
        response.status_code == status and isinstance(parsed, Problem),
        f"expected a {status} problem, got {response.status_code}: {response.content[:300]!r}",
    )
    check(parsed.status == status, f"problem status {parsed.status}, not {status}")
    check(parsed.code == code, f"problem code {parsed.code!r}, not {code!r}")
    check(parsed.type_ == f"/problems/{code}", f"problem type {parsed.type_!r}")
    return parsed


def accepts(function, client_class):
    """Whether the generated function's `client` parameter takes this class of client."""
    hint = typing.get_type_hints(function)["client"]
    return client_class in (typing.get_args(hint) or (hint,))


def signatures(_anonymous, _keyed):
    """A plain (anonymous) Client is accepted wherever the API takes anonymous calls; only the
    job listing asks for an AuthenticatedClient."""
    for module in (submit_render, get_job, list_skins, upload_skin, upload_skin_legacy, health):
        for function in (module.sync_detailed, module.asyncio_detailed):
            check(
                accepts(function, Client),
                f"{module.__name__}.{function.__name__} refuses an anonymous Client",
            )
    check(
        not accepts(list_jobs.sync_detailed, Client),
        "list_jobs should need an AuthenticatedClient (GET /v1/jobs requires a key)",
    )


def healthy(anonymous, _keyed):
    response = health.sync_detailed(client=anonymous)
    check(response.status_code == 200, f"health: {response.status_code}")
    check(isinstance(response.parsed, Health), "health: not parsed")
    check(response.parsed.status == HealthStatus.OK, f"health: {response.parsed.status}")


def submitted(client, body):
    response = submit_render.sync_detailed(client=client, body=body)
    check(
        response.status_code == 202 and isinstance(response.parsed, Admitted),
        f"render: expected 202, got {response.status_code}: {response.content[:300]!r}",
    )
    admitted = response.parsed
    check(response.headers.get("location") == link(f"/v1/jobs/{admitted.job_id}"), "render: Location")
    check(admitted.links.status == link(f"/v1/jobs/{admitted.job_id}"), "render: links.status")
    return admitted.job_id


def read_back(client, job_id):
    response = get_job.sync_detailed(job_id, client=client)
    check(
        response.status_code == 200 and isinstance(response.parsed, Job),
        f"job: expected 200, got {response.status_code}: {response.content[:300]!r}",
    )
    job = response.parsed
    check(job.job_id == job_id, "job: another id")
    check(isinstance(job.status, JobStatus), "job: status not parsed")
    check(isinstance(job.config, RenderOptions), "job: config not parsed as RenderOptions")
    check(0 <= job.progress <= 100, f"job: progress {job.progress}")
    check(job.created_at.tzinfo is not None, "job: created_at not parsed")
    check(job.links.self_ == link(f"/v1/jobs/{job_id}"), "job: links.self")
    return job


def anonymous_render(anonymous, _keyed):
    """The plain use: a replay and nothing else; the generated model sends the spec's defaults."""
    body = SubmitRenderBody(replay=replay("valid_0.osr"))
    job_id = submitted(anonymous, body)
    job = read_back(anonymous, job_id)
    check(job.status == JobStatus.QUEUED, f"job: {job.status}")
    check(job.sandbox is False, "job: a live submission is no sandbox job")
    check(len(OPTIONS) == 52, f"the model has {len(OPTIONS)} render options, not o!rdr's 50 and two")
    sent = {name: plain(getattr(body, name)) for name in OPTIONS if name not in CHOSEN_BY_SERVER}
    stored = {name: plain(getattr(job.config, name)) for name in sent}
    check(stored == sent, f"job config {stored} is not what was sent {sent}")
    check(job.config.resolution == RenderOptionsResolution.HD1080, f"resolution {job.config.resolution}")


def server_defaults(anonymous, _keyed):
    """A form without any option: the server's defaults must be the spec's, which the
    generated model holds (a wrong spec default would be sent as if chosen)."""
    unset = {name: UNSET for name in OPTIONS}
    job = read_back(anonymous, submitted(anonymous, SubmitRenderBody(replay=replay("valid_1.osr"), **unset)))
    spec = SubmitRenderBody(replay=replay("valid_1.osr"))
    check(isinstance(spec.resolution, Unset), "the spec gives resolution a default: a client would send it")
    for name in OPTIONS:
        if name in CHOSEN_BY_SERVER:
            continue
        default = plain(getattr(spec, name))
        check(not isinstance(default, Unset), f"the spec has no default for {name}")
        check(
            plain(getattr(job.config, name)) == default,
            f"{name}: the server's default is {plain(getattr(job.config, name))!r}, the spec's {default!r}",
        )


def problems(anonymous, _keyed):
    """Refusals parse as Problem, with their code and status."""
    bad_skin = SubmitRenderBody(replay=replay("valid_0.osr"), skin="bad/skin")
    problem(submit_render.sync_detailed(client=anonymous, body=bad_skin), 422, "invalid_field")
    not_osr = SubmitRenderBody(replay=replay("valid_0.osr", file_name="replay.txt"))
    problem(submit_render.sync_detailed(client=anonymous, body=not_osr), 400, "invalid_file")
    not_a_replay = SubmitRenderBody(replay=replay("corrupt_truncated.osr"))
    problem(submit_render.sync_detailed(client=anonymous, body=not_a_replay), 415, "invalid_replay")
    # The listing without a key (the generated signature asks for an AuthenticatedClient, as
    # the spec requires one; at run time a plain Client sends no Authorization).
    response = list_jobs.sync_detailed(client=anonymous)
    problem(response, 401, "api_key_required")
    check(response.headers.get("www-authenticate") == "Bearer", "401 without WWW-Authenticate: Bearer")
    # A code added after the client was generated still parses: `code` is an open string.
    future = Problem.from_dict(
        {"type": "/problems/new_code", "title": "New", "status": 409, "detail": "d", "code": "new_code"}
    )
    check(future.code == "new_code", "a new problem code does not parse")


def keyed_listing(_anonymous, keyed):
    """A key's jobs, followed page by page with the cursor, newest first."""
    names = ("valid_0.osr", "valid_1.osr", "valid_long.osr")
    made = [submitted(keyed, SubmitRenderBody(replay=replay(name))) for name in names]
    seen = []
    cursor = UNSET
    pages = 0
    while True:
        response = list_jobs.sync_detailed(client=keyed, limit=2, cursor=cursor)
        check(
            response.status_code == 200 and isinstance(response.parsed, ListJobsResponse200),
            f"list: expected 200, got {response.status_code}: {response.content[:300]!r}",
        )
        page = response.parsed
        pages += 1
        check(page.limit == 2 and len(page.items) <= 2, f"list: {len(page.items)} items, limit {page.limit}")
        for job in page.items:
            check(isinstance(job, Job) and isinstance(job.config, RenderOptions), "list: item not parsed")
            check(job.artifacts is None, "list: an item with artifacts")
        seen += [job.job_id for job in page.items]
        if isinstance(page.next_cursor, Unset):
            check(isinstance(page.next_, Unset), "list: `next` without `next_cursor`")
            break
        check(page.next_.startswith(link("/v1/jobs?")), f"list: next {page.next_!r} is not absolute")
        check(page.next_.endswith(f"cursor={page.next_cursor}"), f"list: next {page.next_!r}")
        if pages == 1:
            check(page.total == 3 and page.total_capped is False, f"list: total {page.total}")
        else:
            check(isinstance(page.total, Unset), "list: a later page counts nothing")
        check(pages < 5, "list: the cursor does not end")
        cursor = page.next_cursor
    check(pages == 2, f"list: {pages} pages of 2 for 3 jobs")
    check(seen == list(reversed(made)), f"list: {seen}, not the key's jobs newest first {made[::-1]}")
    queued = list_jobs.sync_detailed(client=keyed, status=JobStatus.QUEUED).parsed
    check(isinstance(queued, ListJobsResponse200) and len(queued.items) == 3, "list: status=queued")


def skin_archive():
    """The smallest skin: a zip of one skin.ini."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("skin.ini", "[General]\nName: Client Check\n")
    buffer.seek(0)
    return buffer


def skins(anonymous, _keyed):
    archive = File(payload=skin_archive(), file_name="Client Check.osk", mime_type="application/octet-stream")
    upload = SkinForm(skin=archive)
    response = upload_skin.sync_detailed(client=anonymous, body=upload)
    check(
        response.status_code == 201 and isinstance(response.parsed, UploadSkinResponse201),
        f"skin upload: expected 201, got {response.status_code}: {response.content[:300]!r}",
    )
    check(response.parsed.skin == "Client Check", f"skin upload: {response.parsed.skin!r}")
    listed = list_skins.sync_detailed(client=anonymous)
    check(isinstance(listed.parsed, ListSkinsResponse200), f"skins: {listed.status_code}")
    check({"Default", "Client Check"} <= set(listed.parsed.skins), f"skins: {listed.parsed.skins}")
    request = UploadSkinJsonBody(name="Client Check Big", size=22)
    presigned = upload_skin.sync_detailed(client=anonymous, body=request)
    check(
        presigned.status_code == 200 and isinstance(presigned.parsed, PresignedUpload),
        f"presigned: expected 200, got {presigned.status_code}: {presigned.content[:300]!r}",
    )
    check(presigned.parsed.max_bytes == 22, f"presigned: max_bytes {presigned.parsed.max_bytes}")
    check(presigned.parsed.upload.fields.additional_properties, "presigned: no fields")
    too_small = UploadSkinJsonBody(name="Client Check Big", size=21)
    problem(upload_skin.sync_detailed(client=anonymous, body=too_small), 422, "invalid_field")


class Loopback:
    """A bot's own HTTP server on loopback: it serves a replay (for `replay_url`) and receives
    callbacks, each parsed by the generated JobCallback model."""

    def __init__(self, replay_bytes):
        self.callbacks = []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                self.send_response(200)
                self.send_header("Content-Length", str(len(replay_bytes)))
                self.end_headers()
                self.wfile.write(replay_bytes)

            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                outer.callbacks.append(JobCallback.from_dict(json.loads(body)))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *_):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def url(self, path):
        return f"http://127.0.0.1:{self.server.server_address[1]}{path}"


def until(what, read, done, seconds=20):
    """`read()` until `done` of it, within `seconds`."""
    deadline = time.monotonic() + seconds
    while True:
        value = read()
        if done(value):
            return value
        check(time.monotonic() < deadline, f"{what}: not within {seconds} s: {value}")
        time.sleep(0.5)


def bot_flow(_anonymous, _keyed):
    """What a bot ported from o!rdr does, through the generated client alone, with none of the
    review's workarounds: o!rdr's options by name, its own reference, a replay by URL, a
    callback parsed as the model (no additional_properties), the lasting video link's Location,
    the service's status, a rehearsed failure and refusal, a player's jobs of one beatmap."""
    bot = AuthenticatedClient(base_url=URL, token=SANDBOX_KEY, timeout=TIMEOUT, raise_on_unexpected_status=True)
    host = Loopback((REPLAYS / "valid_0.osr").read_bytes())
    with bot:
        body = SubmitRenderBody(
            replay_url=host.url("/replay.osr"),
            resolution=SubmitRenderBodyResolution.W1280X720,
            show_pp_counter=False,
            in_game_bg_dim=60,
            cursor_size=1.5,
            client_reference="discord:1234567890",
            callback_url=host.url("/hook"),
        )
        job_id = submitted(bot, body)
        job = until(
            "the job completes",
            lambda: read_back(bot, job_id),
            lambda job: job.status == JobStatus.COMPLETED,
        )
        check(job.client_reference == "discord:1234567890", f"job: client_reference {job.client_reference!r}")
        check(job.config.show_pp_counter is False and job.config.in_game_bg_dim == 60, "job: o!rdr's options")
        check(job.config.cursor_size == 1.5, f"job: cursor_size {job.config.cursor_size}")
        check(job.config.resolution == RenderOptionsResolution.HD720, f"job: {job.config.resolution}")
        check(job.links.video == link(f"/v1/jobs/{job_id}/video"), f"job: links.video {job.links.video!r}")
        check(not isinstance(job.artifacts.thumbnail_url, Unset), "job: artifacts.thumbnail_url")
        for module in (get_job_video, get_job_thumbnail):
            redirect = module.sync_detailed(job_id, client=bot)
            check(redirect.status_code == 302, f"{module.__name__}: {redirect.status_code}")
            check(redirect.headers.get("location", "").startswith("http"), f"{module.__name__}: Location")
        done = until(
            "the completed callback",
            lambda: [c for c in host.callbacks if c.status == JobStatus.COMPLETED],
            bool,
        )[0]
        check(done.client_reference == "discord:1234567890", "callback: client_reference")
        check(done.links.video == link(f"/v1/jobs/{job_id}/video"), f"callback: links.video {done.links.video!r}")
        check(done.replay.player and done.links.additional_properties == {}, "callback: a field left undeclared")
        check(not done.additional_properties, f"callback: undeclared {sorted(done.additional_properties)}")

        failing = SubmitRenderBody(
            replay=replay("valid_1.osr"), sandbox_outcome=SubmitRenderBodySandboxOutcome.SKIN_NOT_FOUND
        )
        failed_id = submitted(bot, failing)
        failed = until(
            "the job fails", lambda: read_back(bot, failed_id), lambda job: job.status == JobStatus.FAILED
        )
        check(failed.error_code == "skin_not_found" and failed.retryable is False, f"failed: {failed.error_code}")
        busy = SubmitRenderBody(
            replay=replay("valid_long.osr"), sandbox_outcome=SubmitRenderBodySandboxOutcome.QUEUE_FULL
        )
        refused = submit_render.sync_detailed(client=bot, body=busy)
        problem(refused, 503, "queue_full")
        check(refused.headers.get("retry-after", "").isdigit(), "queue_full: Retry-After")

        status = get_status.sync_detailed(client=bot)
        check(isinstance(status.parsed, ServiceStatus), f"status: {status.status_code}")
        check(not isinstance(status.parsed.estimated_start, Unset), "status: estimated_start")

        player, beatmap = job.replay.player, job.replay.beatmap_md5
        listed = list_jobs.sync_detailed(client=bot, player=player, beatmap_md5=beatmap).parsed
        check(isinstance(listed, ListJobsResponse200), "list: player and beatmap_md5 together")
        check(job_id in [item.job_id for item in listed.items] and listed.total >= 1, "list: the bot's job")


STEPS = (signatures, healthy, anonymous_render, server_defaults, problems, keyed_listing, skins, bot_flow)


def main():
    started = time.monotonic()
    # Undocumented statuses raise (errors.UnexpectedStatus) rather than parse to None.
    anonymous = Client(base_url=URL, timeout=TIMEOUT, raise_on_unexpected_status=True)
    keyed = AuthenticatedClient(base_url=URL, token=KEY, timeout=TIMEOUT, raise_on_unexpected_status=True)
    with anonymous, keyed:
        for step in STEPS:
            began = time.monotonic()
            try:
                step(anonymous, keyed)
            except Exception as error:  # a failed check, or the client's own error
                print(f"FAILED {step.__name__}: {type(error).__name__}: {error}", file=sys.stderr)
                return 1
            print(f"ok {step.__name__} ({time.monotonic() - began:.2f} s)")
    print(f"the generated client's checks took {time.monotonic() - started:.1f} s")
    print(f"client-check: {len(STEPS)} passed, 0 failed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
