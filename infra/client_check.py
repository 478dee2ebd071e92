"""What a bot author does with a client generated from openapi.yaml (infra/client-check runs it
against the dev server, with the generated `osurender_client` installed): every request and
every parse goes through that client alone. Any step that fails ends the run with exit 1.

Environment: OSR_URL (the server), OSR_API_KEY (a live key made for the run), OSR_REPLAYS
(tests/fixtures/replays).
"""

import io
import os
import sys
import time
import typing
import zipfile
from pathlib import Path

import httpx  # the generated client's own dependency: only for its timeout

from osurender_client import AuthenticatedClient, Client
from osurender_client.api.jobs import get_job, list_jobs
from osurender_client.api.operations import health
from osurender_client.api.renders import submit_render
from osurender_client.api.skins import list_skins, upload_skin, upload_skin_legacy
from osurender_client.models import (
    Admitted,
    Health,
    HealthStatus,
    Job,
    JobStatus,
    ListJobsResponse200,
    ListSkinsResponse200,
    PresignedUpload,
    Problem,
    RenderOptions,
    SkinForm,
    SubmitRenderBody,
    UploadSkinJsonBody,
    UploadSkinResponse201,
)
from osurender_client.types import UNSET, File, Unset

URL = os.environ["OSR_URL"]
KEY = os.environ["OSR_API_KEY"]
REPLAYS = Path(os.environ["OSR_REPLAYS"])
TIMEOUT = httpx.Timeout(30.0)

# The render options of the form, as RenderOptions (a job's `config`) names them.
OPTIONS = (
    "skin",
    "resolution",
    "bg_dim",
    "motion_blur",
    "storyboard",
    "video",
    "snaking_in",
    "snaking_out",
    "hit_error_meter",
    "key_overlay",
)


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
    check(response.headers.get("location") == f"/v1/jobs/{admitted.job_id}", "render: Location")
    check(admitted.links.status == f"/v1/jobs/{admitted.job_id}", "render: links.status")
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
    check(job.links.self_ == f"/v1/jobs/{job_id}", "job: links.self")
    check(job.sandbox is False, "job: a live submission is no sandbox job")
    return job


def anonymous_render(anonymous, _keyed):
    """The plain use: a replay and nothing else; the generated model sends the spec's defaults."""
    body = SubmitRenderBody(replay=replay("valid_0.osr"))
    job_id = submitted(anonymous, body)
    job = read_back(anonymous, job_id)
    check(job.status == JobStatus.QUEUED, f"job: {job.status}")
    sent = {name: plain(getattr(body, name)) for name in OPTIONS}
    stored = {name: plain(getattr(job.config, name)) for name in OPTIONS}
    check(stored == sent, f"job config {stored} is not what was sent {sent}")


def server_defaults(anonymous, _keyed):
    """A form without any option: the server's defaults must be the spec's, which the
    generated model holds (a wrong spec default would be sent as if chosen)."""
    unset = {name: UNSET for name in OPTIONS}
    job = read_back(anonymous, submitted(anonymous, SubmitRenderBody(replay=replay("valid_1.osr"), **unset)))
    spec = SubmitRenderBody(replay=replay("valid_1.osr"))
    for name in OPTIONS:
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
        check(page.next_.endswith(f"cursor={page.next_cursor}"), f"list: next {page.next_!r}")
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


STEPS = (signatures, healthy, anonymous_render, server_defaults, problems, keyed_listing, skins)


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
