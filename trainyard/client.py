"""The Trainyard Python SDK: a small typed client of the REST API (`/api/v1/`).

    from trainyard.client import Client, TrainyardError

    with Client("https://trainyard.example.com", "ty_...") as api:
        job = api.submit(open("job.yaml").read(), tenant="vision")
        for line in api.follow_logs(job["id"]):
            print(line["text"])

Every failure is a `TrainyardError`: an answer of the server (4xx/5xx; `status`, `detail` and the
per-field `errors`) or no answer at all (`status` 0, the server could not be reached).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Mapping
from types import TracebackType
from typing import Any, TypedDict, cast
from urllib.parse import quote

import httpx

FINAL_STATES = frozenset({"succeeded", "failed", "cancelled"})
"""Job states nothing moves a job out of."""
STOPPED_STATES = FINAL_STATES | {"halted"}
"""Job states in which no pod runs and the log stops growing (a halted job's until it is resumed):
following a job ends there."""

LOG_PAGE = 1000
RESULT_PAGE = 500
METRIC_PAGE = 10000  # the most points the metrics API gives per page


class LogLine(TypedDict):
    """One line a learner printed; `seq` counts 1, 2, 3, ... per job and learner.

    Lines that came over the WebSocket carry no `ts` and no `attempt` (None), unless they were followed
    with `exact=True`.
    """

    learner: int
    attempt: int | None
    seq: int
    ts: str | None
    text: str


class LogPage(TypedDict):
    """An answer of the logs endpoint."""

    lines: list[LogLine]
    last_seq: int | None


class JobPage(TypedDict):
    """One page of the job list."""

    count: int
    next: str | None
    previous: str | None
    results: list[dict[str, Any]]


class TrainyardError(Exception):
    """The API refused a request (`status` 4xx/5xx) or could not be reached (`status` 0).

    `detail` is the server's message; `errors` maps a field (or "" for the request as a whole) to its
    messages.
    """

    def __init__(self, status: int, detail: str, errors: Mapping[str, list[str]] | None = None) -> None:
        self.status = status
        self.detail = detail
        self.errors = dict(errors or {})
        super().__init__(detail)

    @property
    def unreachable(self) -> bool:
        """True when no answer came from the server at all."""
        return self.status == 0


def _flatten(value: Any, prefix: str = "") -> dict[str, list[str]]:
    """DRF's nested error shapes (`{"a": {"b": ["msg"]}}`, `["msg"]`, "msg") as `{"a.b": ["msg"]}`."""
    if isinstance(value, Mapping):
        out: dict[str, list[str]] = {}
        for key, inner in value.items():
            for name, msgs in _flatten(inner, f"{prefix}.{key}" if prefix else str(key)).items():
                out.setdefault(name, []).extend(msgs)
        return out
    if isinstance(value, list):
        plain: list[str] = []
        nested: dict[str, list[str]] = {}
        for item in value:
            if isinstance(item, Mapping | list):
                for name, inner in _flatten(item, prefix).items():
                    nested.setdefault(name, []).extend(inner)
            else:
                plain.append(str(item))
        return ({prefix: plain} if plain else {}) | nested
    return {prefix: [str(value)]}


def error_from_response(response: httpx.Response) -> TrainyardError:
    """A TrainyardError from a 4xx/5xx answer, whatever shape its body has."""
    try:
        body = response.json()
    except ValueError:
        hint = " (see the server's log)" if response.status_code >= 500 else " (is this a Trainyard server?)"
        return TrainyardError(response.status_code, f"{response.url} answered without a JSON body{hint}")
    if isinstance(body, Mapping) and ("detail" in body or "errors" in body):
        errors = _flatten(body.get("errors") or {})
        detail = str(body.get("detail") or "")
    else:
        errors = _flatten(body)
        detail = ""
    if not detail:
        detail = "; ".join(m for msgs in errors.values() for m in msgs) or f"HTTP {response.status_code}"
    return TrainyardError(response.status_code, detail, errors)


class Client:
    """A client of one Trainyard server, authenticated by an API token (`ty_...`)."""

    def __init__(
        self,
        base_url: str,
        token: str | None,
        *,
        timeout: float = 30.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.token = token
        headers = {"Accept": "application/json", "User-Agent": "trainyard-cli"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        self._http = httpx.Client(
            base_url=self.base_url + "/api/v1/", headers=headers, timeout=timeout, transport=transport
        )

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection pool."""
        self._http.close()

    def request(self, method: str, path: str, **kwargs: Any) -> Any:
        """One API call; returns the decoded JSON body (None when empty), raises TrainyardError."""
        try:
            response = self._http.request(method, path, **kwargs)
        except (httpx.HTTPError, httpx.InvalidURL) as exc:
            raise TrainyardError(0, f"cannot reach {self.base_url}: {exc or type(exc).__name__}") from exc
        if response.status_code >= 400:
            raise error_from_response(response)
        if not response.content:
            return None
        try:
            return response.json()
        except ValueError as exc:
            raise TrainyardError(
                response.status_code, f"{self.base_url} answered {path} with something other than JSON"
            ) from exc

    # Tenants, cluster, tokens

    def tenants(self) -> list[dict[str, Any]]:
        """The tenants you belong to, with quota, usage and your role."""
        return cast(list[dict[str, Any]], self.request("GET", "tenants/"))

    def tenant(self, slug: str) -> dict[str, Any]:
        """One tenant by slug."""
        return cast(dict[str, Any], self.request("GET", f"tenants/{slug}/"))

    def members(self, slug: str) -> list[dict[str, Any]]:
        """The tenant's members and roles (owners see e-mail addresses too)."""
        return cast(list[dict[str, Any]], self.request("GET", f"tenants/{slug}/members/"))

    def member_add(self, slug: str, username: str, role: str = "member") -> dict[str, Any]:
        """Add an existing user to the tenant with `role` (owners and platform admins)."""
        body = {"username": username, "role": role}
        return cast(dict[str, Any], self.request("POST", f"tenants/{slug}/members/", json=body))

    def member_role(self, slug: str, username: str, role: str) -> dict[str, Any]:
        """Give a member another role (owners; the last owner keeps theirs)."""
        path = f"tenants/{slug}/members/{username}/"
        return cast(dict[str, Any], self.request("PATCH", path, json={"role": role}))

    def member_remove(self, slug: str, username: str) -> None:
        """Take a member out of the tenant (owners; never the last owner)."""
        self.request("DELETE", f"tenants/{slug}/members/{username}/")

    def registries(self, slug: str) -> list[dict[str, Any]]:
        """The tenant's registry credentials: name, host, username, who created and rotated them (never a
        password)."""
        return cast(list[dict[str, Any]], self.request("GET", f"tenants/{slug}/registries/"))

    def registry_add(self, slug: str, name: str, host: str, username: str, password: str) -> dict[str, Any]:
        """Store pull credentials for a registry host (owners); the password is sealed and never returned."""
        body = {"name": name, "host": host, "username": username, "password": password}
        return cast(dict[str, Any], self.request("POST", f"tenants/{slug}/registries/", json=body))

    def registry_rotate(self, slug: str, name: str, username: str, password: str) -> dict[str, Any]:
        """Replace a registry credential's username and password (owners)."""
        body = {"username": username, "password": password}
        return cast(
            dict[str, Any],
            self.request("PUT", f"tenants/{slug}/registries/{quote(name, safe='')}/", json=body),
        )

    def registry_delete(self, slug: str, name: str) -> None:
        """Delete a registry credential (owners)."""
        self.request("DELETE", f"tenants/{slug}/registries/{quote(name, safe='')}/")

    def registry_events(self, slug: str) -> list[dict[str, Any]]:
        """Who created, rotated or deleted the tenant's registry credentials, newest first."""
        return cast(list[dict[str, Any]], self.request("GET", f"tenants/{slug}/registry-events/"))

    def cluster(self) -> dict[str, Any]:
        """The cluster's nodes with allocatable and free resources."""
        return cast(dict[str, Any], self.request("GET", "cluster/"))

    def tokens(self) -> list[dict[str, Any]]:
        """Your API tokens (never their secrets)."""
        return cast(list[dict[str, Any]], self.request("GET", "tokens/"))

    def token_create(self, name: str, scope: str = "submit", expires_at: str | None = None) -> dict[str, Any]:
        """A new token of `scope` (read, submit or admin) expiring at `expires_at` (ISO 8601; None: the
        server's default); its secret is in `token`, shown this once."""
        body: dict[str, Any] = {"name": name, "scope": scope}
        if expires_at is not None:
            body["expires_at"] = expires_at
        return cast(dict[str, Any], self.request("POST", "tokens/", json=body))

    def token_revoke(self, token_id: int) -> None:
        """Revoke one of your tokens."""
        self.request("DELETE", f"tokens/{token_id}/")

    # Notifications

    def notifications(self, *, tenant: str | None = None) -> list[dict[str, Any]]:
        """Your notification subscriptions and those of tenants you own."""
        params = {"tenant": tenant} if tenant else None
        return cast(list[dict[str, Any]], self.request("GET", "notifications/", params=params))

    def notification_add(self, **fields: Any) -> dict[str, Any]:
        """A new subscription; a webhook's signing secret is in `secret`, shown this once."""
        return cast(dict[str, Any], self.request("POST", "notifications/", json=fields))

    def notification_update(self, subscription_id: int, **fields: Any) -> dict[str, Any]:
        """Change a subscription's name, events, queued_minutes or enabled."""
        return cast(dict[str, Any], self.request("PATCH", f"notifications/{subscription_id}/", json=fields))

    def notification_remove(self, subscription_id: int) -> None:
        """Delete a subscription."""
        self.request("DELETE", f"notifications/{subscription_id}/")

    def notification_test(self, subscription_id: int) -> dict[str, Any]:
        """Queue a test notification; it shows in the delivery log."""
        return cast(dict[str, Any], self.request("POST", f"notifications/{subscription_id}/test/"))

    def notification_deliveries(self, subscription_id: int) -> list[dict[str, Any]]:
        """The subscription's newest notifications, each with its attempts."""
        return cast(list[dict[str, Any]], self.request("GET", f"notifications/{subscription_id}/deliveries/"))

    # Jobs

    def jobs(
        self,
        *,
        tenant: str | None = None,
        status: str | None = None,
        owner: str | None = None,
        search: str | None = None,
        page: int = 1,
        experiment: str | None = None,
        tag: str | None = None,
        metrics: str | None = None,
    ) -> JobPage:
        """A page of the jobs you may see, newest first; `owner="me"` for your own; `metrics="loss,acc"`
        adds each job's last and best value of those metrics."""
        params = {
            "tenant": tenant, "status": status, "owner": owner, "search": search, "page": page,
            "experiment": experiment, "tag": tag, "metrics": metrics,
        }  # fmt: skip
        query = {k: v for k, v in params.items() if v not in (None, "")}
        return cast(JobPage, self.request("GET", "jobs/", params=query))

    def job(self, job_id: str) -> dict[str, Any]:
        """One job with its spec, placements and current learners."""
        return cast(dict[str, Any], self.request("GET", f"jobs/{job_id}/"))

    def submit(
        self, spec: str | Mapping[str, Any], tenant: str | None = None, code: bytes | None = None
    ) -> dict[str, Any]:
        """Submit a Trainyard spec or FfDL manifest (YAML/JSON text or a mapping); returns the new job.

        `code` is a ZIP of the model definition (see `archive.pack_code`), unpacked into the learners'
        MODEL_DIR; it goes with the spec as a multipart form.
        """
        if code is not None:
            text = spec if isinstance(spec, str) else json.dumps(dict(spec))
            form = {"spec": text, **({"tenant": tenant} if tenant else {})}
            files = {"code": ("code.zip", code, "application/zip")}
            return cast(dict[str, Any], self.request("POST", "jobs/", data=form, files=files))
        body: dict[str, Any] = {"spec": spec if isinstance(spec, str) else dict(spec)}
        if tenant:
            body["tenant"] = tenant
        return cast(dict[str, Any], self.request("POST", "jobs/", json=body))

    def download(self, job_id: str, what: str = "results") -> bytes:
        """A job's result files as one ZIP (`what="results"`) or the code ZIP it ran (`what="code"`)."""
        path = f"jobs/{job_id}/results.zip" if what == "results" else f"jobs/{job_id}/code/"
        try:
            response = self._http.get(path, headers={"Accept": "application/zip, application/json"})
        except (httpx.HTTPError, httpx.InvalidURL) as exc:
            raise TrainyardError(0, f"cannot reach {self.base_url}: {exc or type(exc).__name__}") from exc
        if response.status_code >= 400:
            raise error_from_response(response)
        return response.content

    def compare(self, job_ids: list[str], *, points: int | None = None) -> dict[str, Any]:
        """Jobs side by side: hyperparameters, final metrics (last and best) and downsampled curves."""
        params: dict[str, Any] = {"ids": ",".join(job_ids)}
        if points is not None:
            params["points"] = points
        return cast(dict[str, Any], self.request("GET", "jobs/compare/", params=params))

    def compare_csv(self, job_ids: list[str]) -> str:
        """The comparison as CSV text: one row per job (labels, hyperparameters, each metric's last and best)."""
        params = {"ids": ",".join(job_ids), "format": "csv"}
        try:
            response = self._http.get("jobs/compare/", params=params, headers={"Accept": "text/csv"})
        except (httpx.HTTPError, httpx.InvalidURL) as exc:
            raise TrainyardError(0, f"cannot reach {self.base_url}: {exc or type(exc).__name__}") from exc
        if response.status_code >= 400:
            raise error_from_response(response)
        return response.text

    def relabel(
        self, job_id: str, *, experiment: str | None = None, tags: list[str] | None = None
    ) -> dict[str, Any]:
        """Change a job's experiment and/or tags."""
        body: dict[str, Any] = {}
        if experiment is not None:
            body["experiment"] = experiment
        if tags is not None:
            body["tags"] = tags
        return cast(dict[str, Any], self.request("PATCH", f"jobs/{job_id}/", json=body))

    def results(self, job_id: str, *, attempt: int | None = None) -> list[dict[str, Any]]:
        """The result files of the job's latest attempt that uploaded any (or of `attempt`), every page."""
        return list(self.iter_results(job_id, attempt=attempt))

    def iter_results(self, job_id: str, *, attempt: int | None = None) -> Iterator[dict[str, Any]]:
        """The result files one at a time, following the listing's pages (`next`) to the last."""
        params: dict[str, Any] | None = {"page_size": RESULT_PAGE}
        if attempt is not None:
            params = {"page_size": RESULT_PAGE, "attempt": attempt}
        url: str | None = f"jobs/{job_id}/results/"
        while url is not None:
            page = cast(JobPage, self.request("GET", url, params=params))
            yield from page["results"]
            url, params = page["next"], None  # the next link carries the query

    def cancel(self, job_id: str) -> dict[str, Any]:
        """Cancel a job (a waiting one at once, a running one once its pods are gone)."""
        return cast(dict[str, Any], self.request("POST", f"jobs/{job_id}/cancel/"))

    def halt(self, job_id: str) -> dict[str, Any]:
        """Halt a job (a waiting one at once, a running one once its pods are gone); resume it later."""
        return cast(dict[str, Any], self.request("POST", f"jobs/{job_id}/halt/"))

    def resume(self, job_id: str) -> dict[str, Any]:
        """Send a halted job back to the queue, to go on from its checkpoint."""
        return cast(dict[str, Any], self.request("POST", f"jobs/{job_id}/resume/"))

    def delete(self, job_id: str) -> None:
        """Delete a finished job with its logs, metrics, result files and checkpoints."""
        self.request("DELETE", f"jobs/{job_id}/")

    def retry(self, job_id: str) -> dict[str, Any]:
        """Submit a finished job again; returns the new job."""
        return cast(dict[str, Any], self.request("POST", f"jobs/{job_id}/retry/"))

    def events(self, job_id: str) -> list[dict[str, Any]]:
        """A job's history: state changes and what caused them."""
        return cast(list[dict[str, Any]], self.request("GET", f"jobs/{job_id}/events/"))

    def metrics(self, job_id: str, name: str | None = None) -> list[dict[str, Any]]:
        """A job's metric points, optionally of one metric: every page, by name, then step."""
        return list(self.iter_metrics(job_id, name=name))

    def iter_metrics(self, job_id: str, *, name: str | None = None) -> Iterator[dict[str, Any]]:
        """The metric points one at a time, following the list's pages (`next`) to the last."""
        params: dict[str, Any] | None = {"page_size": METRIC_PAGE} | ({"name": name} if name else {})
        url: str | None = f"jobs/{job_id}/metrics/"
        while url is not None:
            page = cast(dict[str, Any], self.request("GET", url, params=params))
            yield from page["results"]
            url, params = page["next"], None  # the next link carries the query and the cursor

    def metric_buckets(self, job_id: str, buckets: int, name: str | None = None) -> list[dict[str, Any]]:
        """Each metric of each learner over its whole step range in at most `buckets` buckets (each with
        its min, max, mean and count: parallel lists), as the job page charts them."""
        params: dict[str, Any] = {"buckets": buckets} | ({"name": name} if name else {})
        body = self.request("GET", f"jobs/{job_id}/metrics/", params=params)
        return cast(list[dict[str, Any]], body["series"])

    def logs(
        self,
        job_id: str,
        *,
        learner: int | None = None,
        after: int = 0,
        limit: int = LOG_PAGE,
        tail: int | None = None,
    ) -> LogPage:
        """One page of log lines: after a sequence number (give `learner` to page), or the last `tail`."""
        params: dict[str, int] = {"after": after, "limit": limit}
        if learner is not None:
            params["learner"] = learner
        if tail is not None:
            params = {"tail": tail} | ({"learner": learner} if learner is not None else {})
        return cast(LogPage, self.request("GET", f"jobs/{job_id}/logs/", params=params))

    def _learners(self, job: Mapping[str, Any], cursors: Mapping[int, int]) -> list[int]:
        count = int((job.get("resources") or {}).get("learners") or 1)
        return sorted(set(range(count)) | set(cursors))

    def _drain(self, job_id: str, learners: list[int], cursors: dict[int, int]) -> Iterator[LogLine]:
        """Every line after each learner's cursor, one page per learner a round, merged by time."""
        pending = list(learners)
        while pending:
            batch: list[LogLine] = []
            more: list[int] = []
            for index in pending:
                page = self.logs(job_id, learner=index, after=cursors.get(index, 0))
                fresh = [line for line in page["lines"] if line["seq"] > cursors.get(index, 0)]
                if fresh:
                    cursors[index] = max(line["seq"] for line in fresh)
                    batch.extend(fresh)
                if len(page["lines"]) >= LOG_PAGE:
                    more.append(index)
            batch.sort(key=lambda line: (line["ts"] or "", line["learner"], line["seq"]))
            yield from batch
            pending = more

    def drain(
        self, job_id: str, cursors: dict[int, int], *, learners: list[int] | None = None
    ) -> Iterator[LogLine]:
        """Every stored line after each learner's cursor (`cursors` is moved on); all learners by default."""
        if learners is None:
            learners = self._learners(self.job(job_id), cursors)
        yield from self._drain(job_id, learners, cursors)

    def iter_logs(self, job_id: str, *, learner: int | None = None) -> Iterator[LogLine]:
        """All stored lines of a job (or of one learner), paged forward per learner."""
        learners = [learner] if learner is not None else self._learners(self.job(job_id), {})
        yield from self._drain(job_id, learners, {})

    def follow_logs(
        self,
        job_id: str,
        *,
        learner: int | None = None,
        tail: int | None = None,
        interval: float = 1.0,
        live: bool = True,
        exact: bool = False,
    ) -> Iterator[LogLine]:
        """Yield a job's lines as they come (each once), until it is in a final state and drained.

        With `tail`, start from the last `tail` lines instead of the beginning. With `live` (the default)
        the lines come over the `/ws/` WebSocket when it can be opened (needs the `websockets` package);
        otherwise, or if it drops, the REST log is polled every `interval` seconds from where the socket
        stopped. `exact` reads the lines of each live frame from REST, so they carry `ts` and `attempt`.
        """
        cursors: dict[int, int] = {}
        if tail is not None:
            job = self.job(job_id)
            learners = [learner] if learner is not None else self._learners(job, {})
            for index in learners:  # each learner's position first, so nothing falls between the two reads
                last = self.logs(job_id, learner=index, tail=1)["lines"]
                cursors[index] = last[-1]["seq"] if last else 0
            for line in self.logs(job_id, learner=learner, tail=tail)["lines"]:
                if line["seq"] <= cursors.get(line["learner"], 0):
                    yield line
        if live:
            from trainyard.live import LiveFollower, LiveUnavailable

            try:
                yield from LiveFollower(self, job_id, cursors, learner=learner, exact=exact)
                return
            except LiveUnavailable:
                pass  # on over REST, from the same cursors
        yield from self.poll_logs(job_id, cursors, learner=learner, interval=interval)

    def poll_logs(
        self, job_id: str, cursors: dict[int, int], *, learner: int | None = None, interval: float = 1.0
    ) -> Iterator[LogLine]:
        """Follow over REST: read on from `cursors` every `interval` seconds until the job is final and
        drained. The job's state is read before each drain, so a job seen final is left only after its
        log was read once more."""
        while True:
            job = self.job(job_id)
            learners = [learner] if learner is not None else self._learners(job, cursors)
            yield from self._drain(job_id, learners, cursors)
            if job["status"] in STOPPED_STATES:
                return
            time.sleep(interval)
