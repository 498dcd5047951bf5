"""tests.helpers.json_api, the local JSON HTTP double of the API tests: it records each request as sent,
answers from its table (a list in turn, its last reply repeating; an unknown request 404) and is gone after
its `with` block."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

from tests.helpers import json_api

DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never through the caller's proxy


def _call(url: str, method: str, body: bytes | None = None) -> tuple[int, object]:
    request = urllib.request.Request(url, data=body, method=method, headers={"X-Token": "t0"})
    try:
        with DIRECT.open(request, timeout=5) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as refused:
        return refused.code, json.loads(refused.read())


def test_the_double_records_requests_answers_from_its_table_and_stops_on_exit() -> None:
    table = {"POST /retry": [(503, {"n": 1}), (200, {"n": 2})], "*": (401, {"detail": "no"})}
    with json_api(table) as api:
        got = [_call(f"{api.url}/retry", "POST", b'{"a": 1}') for _ in range(3)]
        assert got == [(503, {"n": 1}), (200, {"n": 2}), (200, {"n": 2})]
        assert _call(f"{api.url}/other", "DELETE") == (401, {"detail": "no"})
    first = api.requests[0]
    assert (first.method, first.path, first.json()) == ("POST", "/retry", {"a": 1})
    assert first.headers.get("x-token") == "t0"  # headers are looked up case-insensitively
    assert [(r.method, r.path) for r in api.requests[1:]] == [("POST", "/retry")] * 2 + [("DELETE", "/other")]
    with pytest.raises(urllib.error.URLError):
        _call(f"{api.url}/retry", "POST")
    with json_api({"GET /only": (200, {})}) as api:
        status, body = _call(f"{api.url}/only", "POST")
    assert status == 404 and "no reply for POST /only" in str(body)
