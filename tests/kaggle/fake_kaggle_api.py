"""A stand-in for Kaggle's API on 127.0.0.1, for the real kaggle client in a subprocess.

The client is pointed at it with its own switch, KAGGLE_API_ENVIRONMENT=LOCALHOST (endpoint
http://localhost), and HTTP_PROXY=http://127.0.0.1:PORT, so every request of the client, the blob uploads
included, arrives here in proxy form (`POST http://localhost/api/v1/<service>/<method>`). It answers the
calls a publish makes: dataset status, blob upload start and the upload itself, dataset create and
version, kernel save; records each with its JSON body and Authorization header. Nothing leaves the machine.
`FakeKaggle.answer` is the route of a `tests.helpers.json_api` server: `with json_api(state.answer) as api`.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from tests.helpers import HttpRequest, Reply

UPLOAD_PREFIX = "/upload/"


@dataclass
class Call:
    method: str  # "GetDatasetStatus", "StartBlobUpload", "PUT", …
    body: Any
    authorization: str | None


@dataclass
class FakeKaggle:
    """State of the fake API: datasets that exist, blobs uploaded, calls made."""

    existing: set[str] = field(default_factory=set)
    calls: list[Call] = field(default_factory=list)
    blobs: dict[str, dict[str, Any]] = field(default_factory=dict)  # token -> {name, sha256, bytes}
    created: dict[str, list[str]] = field(default_factory=dict)  # dataset ref -> uploaded file names
    kernels: list[dict[str, Any]] = field(default_factory=list)

    def names(self) -> list[str]:
        return [c.method for c in self.calls]

    def answer(self, request: HttpRequest) -> Reply:
        """Record one request of the client and answer it: a JSON call (POST) or a blob upload (PUT)."""
        path = urlsplit(request.path).path
        authorization = request.headers.get("Authorization")
        if request.method == "PUT":
            self.calls.append(Call("PUT", path, authorization))
            token = path[len(UPLOAD_PREFIX) :] if path.startswith(UPLOAD_PREFIX) else None
            if token not in self.blobs:
                return 404, {"code": 404, "message": "no such upload"}
            self.blobs[token].update(sha256=hashlib.sha256(request.body).hexdigest(), bytes=len(request.body))
            return 200, {}
        if request.method != "POST":
            return 501, {"code": 501, "message": f"no fake for {request.method} requests"}
        method, body = path.rsplit("/", 1)[-1], request.json()
        self.calls.append(Call(method, body, authorization))
        return self.rpc(method, body)

    def rpc(self, method: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        if method == "GetDatasetStatus":
            ref = f"{body['ownerSlug']}/{body['datasetSlug']}"
            if ref in self.existing:
                return 200, {"status": "READY"}
            return 404, {"code": 404, "message": f"dataset {ref} not found"}
        if method == "StartBlobUpload":
            token = f"blob{len(self.blobs)}"
            self.blobs[token] = {"name": body["name"], "sha256": None, "bytes": None}
            return 200, {"token": token, "createUrl": f"http://localhost{UPLOAD_PREFIX}{token}"}
        if method in ("CreateDataset", "CreateDatasetVersion"):
            if method == "CreateDataset":
                ref, files = f"{body['ownerSlug']}/{body['slug']}", body.get("files", [])
            else:
                ref, files = f"{body['ownerSlug']}/{body['datasetSlug']}", body["body"].get("files", [])
            self.created[ref] = sorted(self.blobs[f["token"]]["name"] for f in files)
            self.existing.add(ref)
            return 200, {"ref": ref, "url": f"https://www.kaggle.com/datasets/{ref}", "status": "ok"}
        if method == "SaveKernel":
            self.kernels.append(body)
            ref = body["slug"]
            return 200, {"ref": ref, "url": f"https://www.kaggle.com/code/{ref}", "versionNumber": 1}
        return 404, {"code": 404, "message": f"no fake for {method}"}
