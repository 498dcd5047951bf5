"""Build and push driver on the `docker` Python SDK: build variants, tag, push, record digests."""

from __future__ import annotations

import re
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tqdm import tqdm

from tools.images import context, lockfile
from tools.images.variants import ImageConfig, Variant
from trm.errors import TRMError

# Registries commonly refuse layers above 5 GB (some at 10 GB); the venv is split well below this.
LAYER_LIMIT_BYTES = 5_000_000_000
_STEP = re.compile(r"^Step (\d+)/(\d+)")
_REGISTRY_DOWN = ("connection refused", "no such host", "dial tcp", "i/o timeout", "no route to host")
_AUTH = ("unauthorized", "authentication required", "denied", "forbidden")


def connect(factory: Callable[[], Any] | None = None, *, timeout: int = 600):
    """A client for the engine in DOCKER_HOST (or the default socket), checked with a ping.

    `timeout` bounds each API call (the SDK's 60 s default is too short for a loaded 2-core builder).
    """
    import docker

    try:
        client = factory() if factory else docker.from_env(timeout=timeout)
        client.ping()
    except docker.errors.DockerException as err:
        raise TRMError(
            f"no Docker engine reachable ({err}); start one (`dockerd &`, or `systemctl start docker`), "
            "check DOCKER_HOST, and that this user may use the socket"
        ) from None
    return client


@dataclass
class BuiltImage:
    """A variant built locally: image id and local tags."""

    variant: str
    image_id: str
    tags: list[str]
    content_hash: str
    seconds: float
    args: dict[str, str] = field(default_factory=dict)


@dataclass
class PushedImage:
    """A variant pushed to a registry, as recorded in the lock file."""

    variant: str
    repository: str
    digest: str
    tags: list[str]
    entry: dict[str, Any] = field(default_factory=dict)
    """The variant's `docker/images.lock.json` entry (tools.images.lockfile)."""

    @property
    def reference(self) -> str:
        return f"{self.repository}@{self.digest}"


# A registry reference as Docker reads it: a host (a DNS name with a dot, `localhost`, an IPv4 address or
# a bracketed IPv6 address) with an optional port, then optional lower-case path components (Docker Hub
# user or organisation, GHCR owner, Artifact Registry project/repository, Harbor project, ...).
_HOST = re.compile(
    r"^(?:localhost|\[[0-9A-Fa-f:.]+\]|(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)"
    r"(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*)$"
)
_PATH_COMPONENT = re.compile(r"^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*$")
_REGISTRY_EXAMPLES = "e.g. REGISTRY=127.0.0.1:5000, REGISTRY=ghcr.io/my-org or REGISTRY=docker.io/myuser"


def parse_registry(value: str) -> tuple[str, str]:
    """`REGISTRY` checked and split into (host[:port], path); raises a TRMError naming the fix.

    Accepts `host[:port][/path/...]`; the image goes to `<host[:port]>/<path>/<repository>`.
    """
    raw = value.strip().rstrip("/")
    if not raw:
        raise TRMError(f"REGISTRY is empty: name the registry to push to ({_REGISTRY_EXAMPLES})")
    if "://" in raw:
        raise TRMError(
            f"REGISTRY={value!r}: drop the scheme, Docker names registries without it ({_REGISTRY_EXAMPLES})"
        )
    if "@" in raw or any(c.isspace() for c in raw):
        raise TRMError(f"REGISTRY={value!r} may not hold a digest or spaces: give host[:port][/path] only")
    host_port, _, path = raw.partition("/")
    host, colon, port = host_port.rpartition(":") if not host_port.endswith("]") else (host_port, "", "")
    if not colon:
        host, port = host_port, ""
    if colon and not (port.isdigit() and 0 < int(port) < 65536):
        raise TRMError(f"REGISTRY={value!r}: port {port!r} is not a number from 1 to 65535")
    if not _HOST.match(host):
        raise TRMError(f"REGISTRY={value!r}: {host!r} is not a host name or address ({_REGISTRY_EXAMPLES})")
    if not (colon or "." in host or host == "localhost" or host.startswith("[")):
        raise TRMError(
            f"REGISTRY={value!r}: {host!r} is not a registry host (Docker would read it as a Docker Hub user); "
            f"write the host explicitly, e.g. REGISTRY=docker.io/{host}"
        )
    for component in path.split("/") if path else []:
        if not _PATH_COMPONENT.match(component):
            raise TRMError(
                f"REGISTRY={value!r}: path component {component!r} must be lower-case letters and digits, "
                "separated by '.', '_', '__' or '-' (a tag such as :latest does not belong in REGISTRY)"
            )
    if len(raw) > 200:
        raise TRMError(f"REGISTRY={value!r} is {len(raw)} characters; image names are limited to 255 in all")
    return host_port, path


def _registry_error(registry: str, message: str) -> TRMError:
    low = message.lower()
    if any(word in low for word in _AUTH):
        return TRMError(
            f"registry {registry} refused the push ({message.strip()}): log in with "
            f"`docker login {registry.split('/')[0]}` (credentials stay in the engine's store, never in the repo)"
        )
    if any(word in low for word in _REGISTRY_DOWN):
        return TRMError(
            f"registry {registry} is unreachable ({message.strip()}): check the host and port in "
            "REGISTRY and that the registry is running"
        )
    return TRMError(f"push to {registry} failed: {message.strip()}")


class ImageDriver:
    """Builds and pushes the variants of one `ImageConfig` from the checkout at `root`."""

    def __init__(self, client, config: ImageConfig, root: Path, out=sys.stdout) -> None:
        self.client = client
        self.config = config
        self.root = root
        self.out = out

    def args(self, variant: Variant, **overrides: Any) -> dict[str, str]:
        return context.build_args(self.config, variant, self.root, **overrides)

    def local_tags(self, variant: Variant, args: dict[str, str]) -> tuple[str, str]:
        """(`repo:<version>-cu130-sm90`, `repo:<variant>-<content12>`) for these build arguments."""
        digest = context.content_hash(variant, self.root, args)
        repo = self.config.repository
        return (
            f"{repo}:{variant.version_tag(context.project_version(self.root))}",
            f"{repo}:{variant.content_tag(digest)}",
        )

    def _stream(self, events: Iterable[dict[str, Any]], label: str) -> str:
        """Follow a build's JSON stream: print its lines, show steps as a bar; returns the image id."""
        image_id = ""
        bar = tqdm(total=0, desc=label, unit="step", file=self.out, disable=None, dynamic_ncols=True)
        try:
            for event in events:
                if "error" in event:
                    detail = event.get("errorDetail", {}).get("message") or event["error"]
                    raise TRMError(
                        f"building {label} failed: {detail.strip()}\n(the build log above shows the "
                        "failing step; a failed in-build check names what is wrong)"
                    )
                text = event.get("stream", "")
                match = _STEP.match(text)
                if match:
                    bar.total = int(match.group(2))
                    bar.n = int(match.group(1)) - 1
                    bar.refresh()
                for line in text.splitlines():
                    if line.strip():
                        bar.write(line, file=self.out)
                aux = event.get("aux") or {}
                image_id = aux.get("ID", image_id)
            if bar.total:
                bar.n = bar.total
                bar.refresh()
        finally:
            bar.close()
        return image_id

    def build(
        self, variant: Variant, *, nocache: bool = False, target: str = "runtime", **overrides: Any
    ) -> BuiltImage:
        """Build `variant` (no network inside the build), then tag it with both local tags.

        A `target` other than `runtime` (e.g. `adam-atan2`) builds only up to that stage and gets the
        single tag `<repo>:<variant>-<hash>-<target>`.
        """
        args = self.args(variant, **overrides)
        version_tag, content_tag = self.local_tags(variant, args)
        args["CONTENT_HASH"] = content_tag.rsplit("-", 1)[1]
        if target != "runtime":
            version_tag = content_tag = f"{content_tag}-{target}"
        start = time.monotonic()
        with tempfile.TemporaryFile() as ctx:
            files = context.write_context(variant, self.root, ctx)
            ctx.seek(0)
            print(
                f"building {variant.name}: {files} context files -> {version_tag}, {content_tag}",
                file=self.out,
            )
            events = self.client.api.build(
                fileobj=ctx,
                custom_context=True,
                dockerfile=context.DOCKERFILE.as_posix(),
                buildargs=args,
                tag=content_tag,
                target=target,
                network_mode="none",
                rm=True,
                forcerm=True,
                nocache=nocache,
                decode=True,
            )
            image_id = self._stream(events, variant.name)
        if not image_id:
            image_id = self.client.images.get(content_tag).id
        repo, tag = version_tag.split(":")
        self.client.api.tag(image_id, repo, tag)
        seconds = time.monotonic() - start
        print(f"built {variant.name} {image_id[:19]} in {seconds:.0f} s", file=self.out)
        if target == "runtime":  # build stages hold the whole venv in one layer; they are never pushed
            self.check_layers(variant, image_id)
        tags = list(dict.fromkeys([version_tag, content_tag]))
        return BuiltImage(variant.name, image_id, tags, args["CONTENT_HASH"], seconds, args)

    def check_layers(self, variant: Variant, image_id: str) -> int:
        """Print the image size and its largest layer; fail when a layer exceeds LAYER_LIMIT_BYTES."""
        image = self.client.images.get(image_id)
        layers = [entry.get("Size", 0) for entry in image.history()]
        largest = max(layers, default=0)
        size_mb = image.attrs.get("Size", 0) / 1e6
        print(f"{variant.name}: image {size_mb:.0f} MB, largest layer {largest / 1e6:.0f} MB", file=self.out)
        if largest > LAYER_LIMIT_BYTES:
            raise TRMError(
                f"image {variant.name} has a {largest / 1e9:.1f} GB layer, above the "
                f"{LAYER_LIMIT_BYTES / 1e9:.0f} GB registries accept: lower [image].max_layer_bytes in "
                "docker/images.toml or split the offending Dockerfile step"
            )
        return largest

    def push(
        self, variant: Variant, registry: str, *, lock_path: Path | None, **overrides: Any
    ) -> PushedImage:
        """Push the image built from the current inputs to `registry` and record its digest."""
        import docker

        host, path = parse_registry(registry)
        registry = f"{host}/{path}" if path else host
        args = self.args(variant, **overrides)
        version_tag, content_tag = self.local_tags(variant, args)
        try:
            image = self.client.images.get(content_tag)
        except docker.errors.ImageNotFound:
            raise TRMError(
                f"no local image {content_tag} for variant {variant.name!r} built from the current inputs: "
                f"run `make image VARIANTS={variant.name}` (same base overrides) before `make push`"
            ) from None
        repository = f"{registry}/{self.config.repository}"
        tags = [version_tag.split(":")[1], content_tag.split(":")[1]]
        digest = ""
        for tag in tags:
            image.tag(repository, tag)
            print(f"pushing {repository}:{tag}", file=self.out, flush=True)
            try:
                events = self.client.api.push(repository, tag=tag, stream=True, decode=True)
                for event in events:
                    if "error" in event:
                        raise _registry_error(
                            registry, event.get("errorDetail", {}).get("message") or event["error"]
                        )
                    aux = event.get("aux") or {}
                    digest = aux.get("Digest", digest)
                    if event.get("status") and event.get("id") is None:
                        print(f"  {event['status']}", file=self.out)
            except docker.errors.APIError as err:
                raise _registry_error(registry, str(err)) from None
        if not digest:
            raise TRMError(f"push of {repository} reported no digest; check the registry's logs")
        entry = {
            "reference": f"{repository}@{digest}",
            "repository": repository,
            "digest": digest,
            "tags": tags,
            "content_hash": context.content_hash(variant, self.root, args),
            "git_sha": args["GIT_SHA"],
            "torch": variant.torch,
            "optimizer_backend": variant.optimizer_backend,
            "cuda": variant.cuda,
            "sm_list": list(variant.sm_list),
            "runtime_base": args["RUNTIME_BASE"],
            # the image's own creation time: the same image pushed again records the same entry
            "created": image.attrs.get("Created", ""),
        }
        pushed = PushedImage(variant.name, repository, digest, tags, entry)
        if lock_path is not None:
            lockfile.record_push(lock_path, variant.name, entry)
        print(f"pushed {pushed.reference}", file=self.out)
        return pushed

    def registry_digest(self, reference: str) -> str:
        """The digest the registry itself reports for `reference` (`repo:tag`), read through the engine
        (its credentials and registry settings): what a host pulling that tag gets, not a local id."""
        import docker

        registry = reference.rsplit(":", 1)[0].rsplit("/", 1)[0]
        try:
            data = self.client.images.get_registry_data(reference)
        except docker.errors.APIError as err:
            raise _registry_error(registry, f"reading back {reference}: {err}") from None
        digest = str(data.id)
        if not lockfile.is_digest(digest):
            raise TRMError(f"registry {registry} answered {digest!r} for {reference}, not a sha256 digest")
        return digest
