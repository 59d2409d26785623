"""GitHub's REST API through one back-off that keeps the limits of ``recipes/limits.yaml``.

Every call of the release's commands goes through :class:`Api`:

- **Pacing.** Content-creating calls (POST, PATCH, PUT, DELETE) are spaced so that no minute
  holds more than the policy's share of ``content_requests_per_minute`` and no hour more than
  its share of ``content_requests_per_hour``; every call so that no hour holds more than its
  share of ``rest_requests_per_hour``. The windows slide: a call waits until the oldest call of
  its window is an hour (or a minute) old.
- **The server's count.** GitHub reports what is left of the repository's hourly budget on every
  answer (``x-ratelimit-remaining``, ``x-ratelimit-reset``): when less than the unused share is
  left, the next call waits for the reset, so that calls of other jobs count too.
- **Back-off.** A rate-limit answer (403 or 429 with ``retry-after``, or with
  ``x-ratelimit-remaining: 0``, or a secondary limit's message) waits as GitHub asks (at least
  a minute without a figure), a server error (5xx) or a lost connection doubles its wait from
  ``backoff_s`` up to ``backoff_max_s``; after ``attempts`` tries the call fails with an
  :class:`ApiError` that names it. Any other answer is returned to the caller.

The clock and the sleep are injected, so the tests run the pacing against a stand-in server on
127.0.0.1 without waiting.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tools.core import exitcodes
from tools.core.errors import CuwheelsError
from tools.plan.limits import Limits

#: Methods that create or change content: GitHub's secondary limits count them apart.
CONTENT_METHODS = frozenset({"POST", "PATCH", "PUT", "DELETE"})


class ApiError(CuwheelsError):
    """A call to GitHub's API that failed for good (or answered with an error the caller
    can't go on from)."""

    exit_code = exitcodes.GITHUB_API


class _KeepRedirects(urllib.request.HTTPRedirectHandler):
    """Hands a redirect back as the answer (its Location is storage's signed address, which
    must not get the token)."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


_NO_REDIRECT = urllib.request.build_opener(_KeepRedirects)


@dataclass
class Response:
    """One answer: its status, headers (lower-case names) and body."""

    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        """The body as JSON."""
        return json.loads(self.body or b"null")


@dataclass
class Api:
    """A paced, backed-off client of one GitHub API (``base``: ``GITHUB_API_URL``)."""

    base: str
    token: str
    limits: Limits
    backoff_s: float = 60
    backoff_max_s: float = 900
    attempts: int = 7
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep
    say: Callable[[str], None] = print
    timeout_s: float = 300
    calls: deque = field(default_factory=deque)
    content: deque = field(default_factory=deque)
    #: Calls made and waits taken, for the job's summary.
    made: int = 0
    waited_s: float = 0.0

    def _wait(self, seconds: float, why: str) -> None:
        if seconds > 0:
            self.say(f"waiting {seconds:.0f} s: {why}")
            self.waited_s += seconds
            self.sleep(seconds)

    def _pace(self, method: str) -> None:
        lim = self.limits
        windows = [(self.calls, lim.paced(lim.rest_requests_per_hour), 3600.0, "REST requests")]
        if method in CONTENT_METHODS:
            windows += [(self.content, lim.paced(lim.content_requests_per_hour), 3600.0,
                         "content-creating requests an hour"),
                        (self.content, lim.paced(lim.content_requests_per_minute), 60.0,
                         "content-creating requests a minute")]
        for log, allowed, span, what in windows:
            allowed = max(1, int(allowed))
            now = self.clock()
            inside = [t for t in log if t > now - span]
            if len(inside) >= allowed:
                self._wait(inside[-allowed] + span - now, f"{allowed} {what} in {span:.0f} s")
        now = self.clock()
        self.calls.append(now)
        if method in CONTENT_METHODS:
            self.content.append(now)
        for log in (self.calls, self.content):
            while log and log[0] <= now - 3600:
                log.popleft()

    def _send(self, method: str, url: str, data: bytes | None,
              headers: dict[str, str], follow: bool = True) -> Response:
        req = urllib.request.Request(url, data=data, method=method, headers={
            "Authorization": f"Bearer {self.token}", "Accept": "application/vnd.github+json",
            "X-GitHub-Api-Version": "2022-11-28", "User-Agent": "cuwheels-release", **headers})
        opener = urllib.request.build_opener() if follow else _NO_REDIRECT
        try:
            with opener.open(req, timeout=self.timeout_s) as answer:
                return Response(answer.status, {k.lower(): v for k, v in answer.headers.items()},
                                answer.read())
        except urllib.error.HTTPError as err:
            return Response(err.code, {k.lower(): v for k, v in (err.headers or {}).items()},
                            err.read() if err.fp else b"")

    def _rate_wait(self, r: Response) -> float | None:
        """Seconds GitHub asks to wait when ``r`` is a rate-limit answer; None otherwise."""
        if r.status not in (403, 429):
            return None
        if "retry-after" in r.headers:
            return max(1.0, float(r.headers["retry-after"]))
        if r.headers.get("x-ratelimit-remaining") == "0" and "x-ratelimit-reset" in r.headers:
            return max(1.0, float(r.headers["x-ratelimit-reset"]) - time.time())
        if b"rate limit" in r.body.lower():
            return 60.0
        return None

    def request(self, method: str, path_or_url: str, *, data: bytes | None = None,
                headers: dict[str, str] | None = None, follow: bool = True) -> Response:
        """One call, paced and backed off (see the module docstring); the answer, whatever its
        status, unless the call failed ``attempts`` times on limits or transient errors."""
        url = path_or_url if "://" in path_or_url \
            else f"{self.base.rstrip('/')}/{path_or_url.lstrip('/')}"
        delay = self.backoff_s
        for attempt in range(1, self.attempts + 1):
            self._pace(method)
            self.made += 1
            asked = None
            try:
                r = self._send(method, url, data, headers or {}, follow)
            except (urllib.error.URLError, OSError) as exc:
                why = f"{type(exc).__name__}: {exc}"
            else:
                asked = self._rate_wait(r)
                if asked is None and r.status < 500:
                    self._respect_budget(r)
                    return r
                why = f"HTTP {r.status}" + (" (rate limit)" if asked is not None else "")
            if attempt == self.attempts:
                raise ApiError(f"{method} {url}: {why}, {self.attempts} times",
                               hint="re-run the job: it sends only what is missing")
            # A rate limit: as long as GitHub asks; a server error or a lost connection: doubling.
            pause = asked if asked is not None else delay
            if asked is None:
                delay = min(self.backoff_max_s, delay * 2)
            self._wait(pause, f"{method} {url}: {why} (attempt {attempt} of {self.attempts})")
        raise AssertionError("unreachable")

    def _respect_budget(self, r: Response) -> None:
        """Wait for the reset when the repository's hourly budget left (what GitHub says) is
        below the share kept for others."""
        left, reset = r.headers.get("x-ratelimit-remaining"), r.headers.get("x-ratelimit-reset")
        if left is None or reset is None or not left.isdigit():
            return
        keep = self.limits.rest_requests_per_hour * (1 - self.limits.rate_share)
        if int(left) < keep:
            self._wait(float(reset) - time.time(), f"{left} REST requests left this hour")

    def json(self, method: str, path: str, body: Any = None) -> Any:
        """A call with a JSON body; its JSON answer; ApiError for a status of 400 or more."""
        data = json.dumps(body).encode() if body is not None else None
        r = self.request(method, path, data=data,
                         headers={"Content-Type": "application/json"} if data else None)
        if r.status >= 400:
            raise ApiError(f"{method} {path}: HTTP {r.status}: {r.body[:300]!r}")
        return r.json()

    def pages(self, path: str, key: str | None = None, per_page: int = 100,
              max_pages: int = 1000) -> list[Any]:
        """Every item of a listing, page by page (``per_page`` a page, at most ``max_pages``
        pages): never one call's cut."""
        out: list[Any] = []
        sep = "&" if "?" in path else "?"
        for page in range(1, max_pages + 1):
            got = self.json("GET", f"{path}{sep}per_page={per_page}&page={page}")
            items = got[key] if key else got
            out.extend(items)
            if len(items) < per_page:
                return out
        raise ApiError(f"GET {path}: more than {max_pages} pages")
