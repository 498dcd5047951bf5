"""Steps that run inside `docker build` (stdlib only: copied into build stages before trm is installed).

    python3 buildtools.py cuda-home VENV                     locate (and complete) the pip CUDA toolkit
    python3 buildtools.py build-adam-atan2 --sdist ... --lock ... --archs "9.0" --out DIR
    python -m trm.images.buildtools install-adam-atan2 --sdist adam_atan2-0.0.3.tar.gz [--target DIR]
                                                             the same patched build on a host with its own
                                                             CUDA torch + nvcc: offline, this GPU's SM only
    python3 buildtools.py check-runtime --sm-list sm_90      assertions on the finished runtime image
    python3 buildtools.py check-cc                          the C build torch.compile's Triton does at run time
(The venv stage's steps are in venvtools.py.)

Every check that fails exits non-zero with a message saying what is wrong, so the build fails.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import time
import zipfile
from pathlib import Path

try:
    from trm.images.venvtools import BuildCheckError, split_layers, subset_lock
except ImportError:  # a script inside a build stage, next to venvtools.py
    from venvtools import BuildCheckError, split_layers, subset_lock  # type: ignore[no-redef]

__all__ = ["BuildCheckError", "split_layers", "subset_lock"]

# The sdist's nvcc flag list with its hard-coded --generate-code entries, and our replacement: the
# plain flags, so torch.utils.cpp_extension adds the arch flags from TORCH_CUDA_ARCH_LIST.
_ADAM_ARCH_LINE = '"nvcc": nvcc_flags_with_arch,'
_ADAM_PLAIN_LINE = '"nvcc": NVCC_FLAGS,'
_ELF_SM = re.compile(r"\bsm_(\d+[a-z]?)\b")
# setuptools_scm: its version and its `setup_requires` (which fetches it from the network when missing).
_ADAM_SCM_LINES = ("use_scm_version=True,", "setup_requires=['setuptools_scm'],")


def lock_hashes(text: str, name: str) -> set[str]:
    """The sha256 values a hash-locked file allows for `name`."""
    entry = subset_lock(text, [name])
    return set(re.findall(r"--hash=sha256:([0-9a-f]+)", entry))


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def patch_adam_setup(text: str) -> str:
    """Make adam-atan2's setup.py honour TORCH_CUDA_ARCH_LIST instead of its fixed sm_80/86/89/90."""
    if text.count(_ADAM_ARCH_LINE) != 1:
        raise BuildCheckError(
            "adam-atan2 setup.py does not have the expected nvcc arch flags line; the sdist changed, "
            "update patch_adam_setup"
        )
    return text.replace(_ADAM_ARCH_LINE, _ADAM_PLAIN_LINE)


# adam-atan2 0.0.3's step() calls a private torch.optim.Optimizer method that torch 2.11 renamed (2.13 has
# both names): with torch 2.11 every step raises AttributeError and the trainer falls back to the torch
# backend. The patched call uses whichever of the two this torch has.
_ADAM_HEALTH_CHECK = "self._cuda_graph_capture_health_check()"
_ADAM_HEALTH_CHECK_EITHER = (
    'getattr(self, "_accelerator_graph_capture_health_check", None) or self._cuda_graph_capture_health_check'
)


def patch_adam_optimizer(text: str) -> str:
    """Make adam-atan2's AdamATan2.step() call the graph-capture health check under either of its names."""
    if text.count(_ADAM_HEALTH_CHECK) != 1:
        raise BuildCheckError(
            "adam_atan2/adam_atan2.py does not call the graph-capture health check as expected; the sdist "
            "changed, update patch_adam_optimizer"
        )
    return text.replace(_ADAM_HEALTH_CHECK, f"({_ADAM_HEALTH_CHECK_EITHER})()")


def patch_adam_sources(src: Path, version: str | None = None) -> None:
    """Every patch our adam-atan2 builds apply to the unpacked sdist `src` (the version pin with `version`)."""
    setup = src / "setup.py"
    text = patch_adam_setup(setup.read_text())
    setup.write_text(pin_adam_version(text, version) if version else text)
    optimizer = src / "adam_atan2" / "adam_atan2.py"
    optimizer.write_text(patch_adam_optimizer(optimizer.read_text()))


def pin_adam_version(text: str, version: str) -> str:
    """Make adam-atan2's setup.py build offline: a fixed version instead of setuptools_scm."""
    if any(text.count(line) != 1 for line in _ADAM_SCM_LINES):
        raise BuildCheckError(
            "adam-atan2 setup.py does not have the expected setuptools_scm lines; the sdist changed, "
            "update pin_adam_version"
        )
    return text.replace(_ADAM_SCM_LINES[0], f"version={version!r},").replace(_ADAM_SCM_LINES[1], "")


def unpack_sdist(sdist: Path, work: Path) -> Path:
    """Extract `sdist` into `work` (refusing links and paths outside it); returns its source folder."""
    with tarfile.open(sdist) as tar:
        for member in tar.getmembers():  # Python < 3.11.4 (Debian's 3.11.2) has no extraction filter
            parts = Path(member.name).parts
            if member.name.startswith("/") or ".." in parts or not (member.isfile() or member.isdir()):
                raise BuildCheckError(f"{sdist.name}: refusing to extract {member.name!r}")
        tar.extractall(work)
    (src,) = work.iterdir()
    return src


def arch_flags_to_sm(archs: str) -> set[str]:
    """`"8.0;9.0"` → `{"sm_80", "sm_90"}` (what cuobjdump must list)."""
    return {"sm_" + a.replace("+PTX", "").replace(".", "") for a in re.split(r"[;\s]+", archs.strip()) if a}


def parse_cuobjdump_elf(output: str) -> set[str]:
    """SM names in `cuobjdump --list-elf` output (lines like `ELF file 1: x.sm_90.cubin`)."""
    return {"sm_" + m for m in _ELF_SM.findall(output)}


def find_cuda_home(venv: Path) -> Path:
    """The pip CUDA toolkit root (`…/site-packages/nvidia/cuXX`), completed for cpp_extension.

    cpp_extension links `-lcudart` from `$CUDA_HOME/lib64`; the wheels ship `lib/libcudart.so.NN` only,
    so add the `lib64` and unversioned `libcudart.so` links a system toolkit would have.
    """
    homes = sorted(venv.glob("lib/python3*/site-packages/nvidia/cu*/bin/nvcc"))
    if len(homes) != 1:
        raise BuildCheckError(f"expected one pip nvcc under {venv}, found {len(homes)}: {homes}")
    home = homes[0].parent.parent
    if not (home / "lib64").exists():
        (home / "lib64").symlink_to("lib")
    cudart = sorted((home / "lib").glob("libcudart.so.*"))
    if not cudart:
        raise BuildCheckError(f"{home}/lib has no libcudart.so.*: the cudart wheel is missing")
    if not (home / "lib" / "libcudart.so").exists():
        (home / "lib" / "libcudart.so").symlink_to(cudart[0].name)
    for header in ("cublas_v2.h", "cusparse.h", "cusolverDn.h", "cuda_runtime.h"):
        if not (home / "include" / header).exists():
            raise BuildCheckError(
                f"{home}/include/{header} missing: add its nvidia-* wheel to the build lock"
            )
    return home


def check_adam_wheel(wheel: Path, version: str, expected_sm: set[str], cuobjdump: str) -> set[str]:
    """Assert the built wheel has the right version, the backend module and exactly the expected SASS."""
    match = re.match(r"adam_atan2-([^-]+)-", wheel.name)
    if not match or match.group(1) != version:
        raise BuildCheckError(f"{wheel.name}: version is not {version} (setuptools_scm missing?)")
    with zipfile.ZipFile(wheel) as zf:
        backends = [n for n in zf.namelist() if re.match(r"adam_atan2_backend[.].*\.so$", n)]
        if len(backends) != 1:
            raise BuildCheckError(
                f"{wheel.name} has no adam_atan2_backend extension (an isolated or CPU-torch build)"
            )
        with tempfile.TemporaryDirectory() as tmp:
            so = Path(zf.extract(backends[0], tmp))
            proc = subprocess.run([cuobjdump, "--list-elf", str(so)], capture_output=True, text=True)
    if proc.returncode != 0:
        raise BuildCheckError(f"cuobjdump failed on {backends[0]}: {proc.stderr.strip()}")
    found = parse_cuobjdump_elf(proc.stdout)
    if found != expected_sm:
        raise BuildCheckError(
            f"{backends[0]} has SASS for {sorted(found)}, expected exactly {sorted(expected_sm)}"
        )
    return found


def build_adam_atan2(
    sdist: Path, lock: Path, archs: str, out: Path, version: str, venv: Path, jobs: int
) -> Path:
    """Check the sdist against the lock, unpack, patch, build (no isolation, no cache), verify the wheel."""
    if sha256_of(sdist) not in lock_hashes(lock.read_text(), "adam-atan2"):
        raise BuildCheckError(f"{sdist.name}: sha256 not among the hashes {lock} allows for adam-atan2")
    home = find_cuda_home(venv)
    cuobjdump = home / "bin" / "cuobjdump"
    if not cuobjdump.exists():
        raise BuildCheckError(f"{cuobjdump} missing: add nvidia-cuda-cuobjdump to the build lock")
    # stdlib's own owner of a temporary folder: removed on success or failure (no trm import in a build stage)
    with tempfile.TemporaryDirectory(prefix="adam-atan2-") as tmp:
        src = unpack_sdist(sdist, Path(tmp))
        patch_adam_sources(src)
        env = dict(
            os.environ,
            CUDA_HOME=str(home),
            PATH=f"{home / 'bin'}:{venv / 'bin'}:{os.environ['PATH']}",
            TORCH_CUDA_ARCH_LIST=archs,
            MAX_JOBS=str(jobs),
            PYTHONHASHSEED="0",
        )
        out.mkdir(parents=True, exist_ok=True)
        start = time.monotonic()
        cmd = [
            str(venv / "bin/python"),
            "-m",
            "pip",
            "wheel",
            "--no-build-isolation",
            "--no-deps",
            "--no-index",
        ]
        cmd += ["--no-cache-dir", "-w", str(out), str(src)]
        subprocess.run(cmd, env=env, check=True)
        minutes, seconds = divmod(time.monotonic() - start, 60)
        print(f"adam-atan2 {version} for {archs}: built in {int(minutes)} min {seconds:.0f} s", flush=True)
        (wheel,) = out.glob("adam_atan2-*.whl")
        found = check_adam_wheel(wheel, version, arch_flags_to_sm(archs), str(cuobjdump))
        subprocess.run(
            [str(venv / "bin/python"), "-m", "pip", "install", "--no-index", "--no-deps", str(wheel)]
        )
        probe = "import torch, adam_atan2, adam_atan2_backend; assert torch.version.cuda, 'CPU torch'"
        if subprocess.run([str(venv / "bin/python"), "-c", probe], env=env).returncode != 0:
            raise BuildCheckError("adam_atan2 does not import next to the image's torch")
        print(f"verified {wheel.name}: version {version}, backend present, SASS {sorted(found)}", flush=True)
    return wheel


def visible_gpu_archs() -> str:
    """TORCH_CUDA_ARCH_LIST of the GPUs this Python's torch sees, e.g. "9.0" on H100s ("" without CUDA)."""
    import torch

    if not torch.cuda.is_available():
        return ""
    caps = {torch.cuda.get_device_capability(i) for i in range(torch.cuda.device_count())}
    return ";".join(f"{major}.{minor}" for major, minor in sorted(caps))


def sdist_version(src: Path) -> str:
    """The `Version:` of an unpacked sdist's PKG-INFO."""
    for line in (src / "PKG-INFO").read_text(encoding="utf-8").splitlines():
        if line.startswith("Version:"):
            return line.split(":", 1)[1].strip()
    raise BuildCheckError(f"{src / 'PKG-INFO'} has no Version: line")


def install_adam_atan2(
    sdist: Path,
    archs: str,
    *,
    target: Path | None = None,
    python: str = sys.executable,
    jobs: int | None = None,
    env: dict[str, str] | None = None,
) -> list[str]:
    """Build and install adam-atan2 from `sdist` with `python`'s own CUDA torch and the host's nvcc.

    The same patched source as the image build (only the SMs of `archs`, no setuptools_scm), built
    offline (`--no-build-isolation --no-index`), in parallel with ninja when it is on PATH. Installs into
    `target` (a folder to put on PYTHONPATH) or else into `python`'s environment; returns what it did.
    """
    if not archs:
        raise BuildCheckError(
            "no GPU architecture to build for: torch sees no CUDA GPU here; pass --archs (e.g. 9.0 for H100)"
        )
    env = dict(os.environ if env is None else env)
    nvcc = shutil.which("nvcc", path=env.get("PATH"))
    if nvcc is None and not env.get("CUDA_HOME"):
        raise BuildCheckError("no nvcc on PATH and CUDA_HOME unset: the extension needs the CUDA compiler")
    if not env.get("CUDA_HOME") and nvcc is not None:
        env["CUDA_HOME"] = str(Path(nvcc).resolve().parent.parent)
    jobs = jobs or os.cpu_count() or 1
    env.update(TORCH_CUDA_ARCH_LIST=archs, MAX_JOBS=str(jobs), PYTHONHASHSEED="0")
    ninja = shutil.which("ninja", path=env.get("PATH"))
    with tempfile.TemporaryDirectory(prefix="adam-atan2-") as tmp:
        src = unpack_sdist(sdist, Path(tmp))
        version = sdist_version(src)
        patch_adam_sources(src, version)
        cmd = [
            python,
            "-m",
            "pip",
            "install",
            "--no-build-isolation",
            "--no-deps",
            "--no-index",
            "--no-cache-dir",
        ]
        cmd += ["--target", str(target), "--upgrade"] if target is not None else []
        start = time.monotonic()
        proc = subprocess.run([*cmd, str(src)], env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            raise BuildCheckError(
                f"building adam-atan2 {version} failed (exit {proc.returncode}):\n{proc.stdout[-3000:]}"
                f"{proc.stderr[-3000:]}"
            )
        seconds = time.monotonic() - start
    notes = [
        f"adam-atan2 {version} for {archs} built in {seconds:.0f} s with {jobs} job(s), "
        + ("ninja" if ninja else "no ninja on PATH (one file at a time)")
    ]
    if target is not None:
        backends = sorted(target.glob("adam_atan2_backend*.so"))
        if len(backends) != 1:
            raise BuildCheckError(f"{target} has no adam_atan2_backend extension after the build")
        cuobjdump = shutil.which("cuobjdump", path=env.get("PATH"))
        if cuobjdump:
            listing = subprocess.run(
                [cuobjdump, "--list-elf", str(backends[0])], capture_output=True, text=True
            )
            found, expected = parse_cuobjdump_elf(listing.stdout), arch_flags_to_sm(archs)
            if found != expected:
                raise BuildCheckError(
                    f"{backends[0]} has SASS for {sorted(found)}, expected {sorted(expected)}"
                )
            notes.append(f"SASS {sorted(found)} (cuobjdump)")
        notes.append(f"installed into {target}")
    return notes


# What Triton (torch.compile's GPU code generator) needs at run time to build its small C launcher
# modules, from triton/runtime/build.py and triton/backends/nvidia/driver.py (3.7): the compiler in $CC,
# else `gcc`, else `clang` on PATH; Python.h in the interpreter's include directory (Debian's
# `posix_local` scheme read as `posix_prefix`); libc headers and a linker for `-shared -fPIC`; and
# /sbin/ldconfig, through which it finds the driver's libcuda.so.1 (mounted by the container toolkit).
PROBE_MODULE = "trm_cc_probe"
PROBE_SOURCE = """\
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <dlfcn.h>
#include <stdbool.h>
#include <stdlib.h>

static PyObject *answer(PyObject *self, PyObject *args) {
  (void)self; (void)args;
  return PyLong_FromLong(42);
}
static PyMethodDef methods[] = {{"answer", answer, METH_NOARGS, NULL}, {NULL, NULL, 0, NULL}};
static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "trm_cc_probe", NULL, -1, methods};
PyMODINIT_FUNC PyInit_trm_cc_probe(void) { return PyModule_Create(&module); }
"""
CC_FIX = (
    "torch.compile (Triton) builds C helpers at run time: the runtime image needs gcc, libc6-dev and the "
    "Python headers; keep [image].runtime_base in docker/images.toml on the full python image (which has "
    "them), not the slim one"
)


def find_c_compiler(env: dict[str, str] | None = None) -> str | None:
    """The C compiler Triton would use: $CC, else `gcc`, else `clang` on PATH (None when none)."""
    env = dict(os.environ if env is None else env)
    if env.get("CC"):
        return env["CC"]
    path = env.get("PATH")
    return shutil.which("gcc", path=path) or shutil.which("clang", path=path)


def python_include_dir() -> Path:
    """Where Triton looks for Python.h: the default scheme's include path (`posix_local` → `posix_prefix`)."""
    scheme = sysconfig.get_default_scheme()
    if scheme == "posix_local":
        scheme = "posix_prefix"
    return Path(sysconfig.get_paths(scheme=scheme)["include"])


def _load_extension(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise BuildCheckError(f"cannot load the compiled probe {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def build_probe(workdir: Path, env: dict[str, str] | None = None) -> tuple[str, str]:
    """Compile and import a Python C extension the way Triton does; returns (compiler, how).

    With triton installed (GPU images) its own build function compiles the probe, so the check follows
    Triton's lookup exactly; without it (CPU image) the same command line is run here.
    """
    cc = find_c_compiler(env)
    if cc is None:
        raise BuildCheckError(f"no C compiler ($CC unset, no gcc or clang on PATH): {CC_FIX}")
    include = python_include_dir()
    if not (include / "Python.h").is_file():
        raise BuildCheckError(f"{include}/Python.h is missing: {CC_FIX}")
    if not Path("/sbin/ldconfig").exists():
        raise BuildCheckError("/sbin/ldconfig is missing: Triton finds libcuda.so.1 through `ldconfig -p`")
    src = workdir / f"{PROBE_MODULE}.c"
    src.write_text(PROBE_SOURCE)
    if importlib.util.find_spec("triton") is not None:
        from triton.runtime import build as triton_build

        try:
            so = Path(triton_build._build(PROBE_MODULE, str(src), str(workdir), [], [], [], []))
        except subprocess.CalledProcessError as err:
            raise BuildCheckError(f"Triton's C build failed ({err}): {CC_FIX}") from None
        except (TypeError, AttributeError) as err:
            raise BuildCheckError(
                f"triton.runtime.build._build changed ({err}): update build_probe for this Triton"
            ) from None
        how = "triton.runtime.build._build"
    else:
        so = workdir / f"{PROBE_MODULE}{sysconfig.get_config_var('EXT_SUFFIX')}"
        cmd = [cc, str(src), "-O3", "-shared", "-fPIC", "-Wno-psabi", "-o", str(so), f"-I{include}"]
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
        if proc.returncode != 0:
            raise BuildCheckError(f"`{' '.join(cmd)}` failed:\n{proc.stderr.strip()}\n{CC_FIX}")
        how = " ".join(cmd[:1] + cmd[2:6])
    if _load_extension(so, PROBE_MODULE).answer() != 42:
        raise BuildCheckError(f"the compiled probe {so} imported but returned a wrong value")
    return cc, how


def check_cc() -> str:
    with tempfile.TemporaryDirectory(prefix="trm-cc-") as tmp:
        cc, how = build_probe(Path(tmp))
    return f"C build for Triton works: {cc} via {how}, Python.h in {python_include_dir()}"


NVIDIA_ENV = {"NVIDIA_VISIBLE_DEVICES": "all", "NVIDIA_DRIVER_CAPABILITIES": "compute,utility"}


def check_runtime(
    sm_list: list[str], env: dict[str, str] | None = None, optimizer_backend: str = "ext"
) -> list[str]:
    """The runtime image: Triton's C build works, no CUDA toolkit outside the venv, NVIDIA container
    variables set on GPU images, trm (+ the adam-atan2 extension where `optimizer_backend` is "ext";
    where it is "torch" the extension must be absent, as the image's label says) imports."""
    env = dict(os.environ if env is None else env)
    notes = [check_cc()]
    if nvcc := shutil.which("nvcc", path=env.get("PATH")):
        raise BuildCheckError(f"runtime image has {nvcc}: the CUDA compiler belongs to the build stages")
    if sm_list:
        for key, want in NVIDIA_ENV.items():
            if env.get(key) != want:
                raise BuildCheckError(
                    f"GPU runtime image has {key}={env.get(key)!r}, needs {want!r}: without it a container "
                    "runtime that defaults to `utility` hides CUDA (set it with ENV in docker/Dockerfile)"
                )
        notes.append(" ".join(f"{k}={env[k]}" for k in NVIDIA_ENV))
    for path in ("/usr/local/cuda", "/usr/lib/x86_64-linux-gnu/libcudart.so"):
        if os.path.exists(path):
            raise BuildCheckError(f"runtime image has CUDA outside the venv ({path}): a second copy")
    probe = "import torch, trm; print('torch', torch.__version__, 'cuda', torch.version.cuda)"
    if sm_list:
        probe += "; assert torch.version.cuda"
        if optimizer_backend == "ext":
            probe += "; import adam_atan2, adam_atan2_backend"
        else:
            probe += (
                "; import importlib.util as u; assert u.find_spec('adam_atan2_backend') is None, 'extension'"
            )
    if subprocess.run([sys.executable, "-c", probe]).returncode != 0:
        raise BuildCheckError(
            "the runtime venv does not import torch/trm (or, on GPU images, its adam-atan2 extension does not "
            f"match the optimizer backend {optimizer_backend!r} the image is labelled with)"
        )
    return notes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="buildtools.py", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("cuda-home")
    p.add_argument("venv", type=Path)
    p = sub.add_parser("build-adam-atan2")
    p.add_argument("--sdist", type=Path, required=True)
    p.add_argument("--lock", type=Path, required=True, help="hash-locked file that pins the sdist")
    p.add_argument("--archs", required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--version", required=True)
    p.add_argument("--venv", type=Path, default=Path("/opt/venv"))
    p.add_argument("--jobs", type=int, default=1)
    p = sub.add_parser(
        "install-adam-atan2", help="build + install adam-atan2 on a host with CUDA torch + nvcc"
    )
    p.add_argument("--sdist", type=Path, required=True, help="adam_atan2-0.0.3.tar.gz (in the GPU kit)")
    p.add_argument(
        "--archs", default=None, help="TORCH_CUDA_ARCH_LIST (default: the visible GPUs', e.g. 9.0)"
    )
    p.add_argument(
        "--target", type=Path, default=None, help="install into this folder (default: this Python)"
    )
    p.add_argument("--jobs", type=int, default=None, help="parallel compile jobs (default: CPU count)")
    p = sub.add_parser("check-runtime")
    p.add_argument("--sm-list", default="")
    p.add_argument("--optimizer-backend", choices=("ext", "torch"), default="ext")
    sub.add_parser("check-cc")
    args = parser.parse_args(argv)
    try:
        if args.cmd == "cuda-home":
            print(find_cuda_home(args.venv))
        elif args.cmd == "build-adam-atan2":
            build_adam_atan2(args.sdist, args.lock, args.archs, args.out, args.version, args.venv, args.jobs)
        elif args.cmd == "install-adam-atan2":
            archs = args.archs if args.archs is not None else visible_gpu_archs()
            for note in install_adam_atan2(args.sdist, archs, target=args.target, jobs=args.jobs):
                print(note, flush=True)
        elif args.cmd == "check-cc":
            print(check_cc())
        else:
            for note in check_runtime(args.sm_list.split(), optimizer_backend=args.optimizer_backend):
                print(f"runtime check: {note}")
    except (BuildCheckError, subprocess.CalledProcessError) as err:
        print(f"build check failed: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
