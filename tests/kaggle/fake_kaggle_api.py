"""A stand-in for Kaggle's API on 127.0.0.1, for the real kaggle client in a subprocess.

The client is pointed at it with its own switch, KAGGLE_API_ENVIRONMENT=LOCALHOST (endpoint
http://localhost), and HTTP_PROXY=http://127.0.0.1:PORT, so every request of the client, the blob uploads
included, arrives here in proxy form (`POST http://localhost/api/v1/<service>/<method>`). It answers the
calls a publish makes: dataset status, blob upload start and the upload itself, dataset create and
version, kernel save; records each with its JSON body and Authorization header. Nothing leaves the machine.
"""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

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
    lock: threading.Lock = field(default_factory=threading.Lock)

    def names(self) -> list[str]:
        return [c.method for c in self.calls]

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


def _handler(state: FakeKaggle) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:  # quiet
            pass

        def _answer(self, status: int, payload: dict[str, Any] | None) -> None:
            data = json.dumps(payload or {}).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _body(self) -> bytes:
            return self.rfile.read(int(self.headers.get("Content-Length") or 0))

        def do_POST(self) -> None:
            path = urlsplit(self.path).path
            body = json.loads(self._body() or b"{}")
            method = path.rsplit("/", 1)[-1]
            with state.lock:
                state.calls.append(Call(method, body, self.headers.get("Authorization")))
                status, payload = state.rpc(method, body)
            self._answer(status, payload)

        def do_PUT(self) -> None:
            path = urlsplit(self.path).path
            data = self._body()
            with state.lock:
                state.calls.append(Call("PUT", path, self.headers.get("Authorization")))
                token = path[len(UPLOAD_PREFIX) :] if path.startswith(UPLOAD_PREFIX) else None
                if token not in state.blobs:
                    self._answer(404, {"code": 404, "message": "no such upload"})
                    return
                state.blobs[token].update(sha256=hashlib.sha256(data).hexdigest(), bytes=len(data))
            self._answer(200, {})

    return Handler


class Server:
    """The fake API serving on 127.0.0.1 (an ephemeral port) in a thread; a context manager."""

    def __init__(self, state: FakeKaggle) -> None:
        self.state = state
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def proxy(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def __enter__(self) -> Server:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)
