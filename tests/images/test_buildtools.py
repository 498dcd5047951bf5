"""The steps that run inside `docker build` (trm/images/buildtools.py), exercised on the host."""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tools.runbooks.pages import reference_pages
from trm.images import buildtools, venvtools
from trm.images.buildtools import BuildCheckError

LOCK = """\
# header
pip==26.3 \\
    --hash=sha256:aa \\
    --hash=sha256:bb
    # via -r build.in
ninja==1.13.2 \\
    --hash=sha256:cc
setuptools==84.2.1 \\
    --hash=sha256:dd
    # via
    #   -r build.in
"""

SETUP_PY = """\
NVCC_FLAGS = ["-O2", "-std=c++17", "--expt-extended-lambda"]
nvcc_flags_with_arch = NVCC_FLAGS + [f"--generate-code=arch=compute_{a},code=sm_{a}" for a in ARCHS]
ext = CUDAExtension("adam_atan2_backend", srcs, extra_compile_args={
    "cxx": CXX_FLAGS,
    "nvcc": nvcc_flags_with_arch,
})
"""


def test_subset_lock_keeps_pins_and_hashes_only():
    out = buildtools.subset_lock(LOCK, ["pip", "Setuptools"])
    assert (
        out
        == "pip==26.3 \\\n    --hash=sha256:aa \\\n    --hash=sha256:bb\nsetuptools==84.2.1 \\\n    --hash=sha256:dd\n"
    )
    with pytest.raises(BuildCheckError, match="no pin for wheel"):
        buildtools.subset_lock(LOCK, ["pip", "wheel"])


def test_subset_lock_exclude_and_hashes():
    out = buildtools.subset_lock(LOCK, ["ninja"], exclude=True)
    assert out.startswith("pip==26.3") and "ninja" not in out and "setuptools==84.2.1" in out
    assert buildtools.lock_hashes(LOCK, "pip") == {"aa", "bb"}


def test_adam_build_refuses_an_sdist_the_lock_does_not_allow(tmp_path):
    sdist = tmp_path / "adam_atan2-0.0.3.tar.gz"
    sdist.write_bytes(b"tampered")
    lock = tmp_path / "build.txt"
    lock.write_text("adam-atan2==0.0.3 \\\n    --hash=sha256:" + "0" * 64 + "\n")
    with pytest.raises(BuildCheckError, match="sha256 not among the hashes"):
        buildtools.build_adam_atan2(sdist, lock, "9.0", tmp_path / "out", "0.0.3", tmp_path / "venv", 1)


def test_adam_setup_patch_drops_hard_coded_arches():
    patched = buildtools.patch_adam_setup(SETUP_PY)
    assert '"nvcc": NVCC_FLAGS,' in patched and '"nvcc": nvcc_flags_with_arch' not in patched
    with pytest.raises(BuildCheckError, match="sdist changed"):
        buildtools.patch_adam_setup(patched)


def test_arch_list_maps_to_sass_names():
    assert buildtools.arch_flags_to_sm("9.0") == {"sm_90"}
    assert buildtools.arch_flags_to_sm("8.0;8.9 9.0+PTX") == {"sm_80", "sm_89", "sm_90"}


def test_blackwell_archs_map_to_their_sass_names_and_the_wheel_check_holds_them(tmp_path):
    """The sm100/sm120 builds: TORCH_CUDA_ARCH_LIST 10.0 / 12.0 must give exactly sm_100 / sm_120 (the
    listing of the sm100 build measured with the build lock's nvcc 13.0.88 and cuobjdump 13.2.51)."""
    assert buildtools.arch_flags_to_sm("10.0") == {"sm_100"} and buildtools.arch_flags_to_sm("12.0") == {
        "sm_120"
    }
    listing = "ELF file    1: adam_atan2_backend.1.sm_100.cubin\\n"
    wheel = _wheel(tmp_path / "adam_atan2-0.0.3-cp311-cp311-linux_x86_64.whl")
    assert buildtools.check_adam_wheel(wheel, "0.0.3", {"sm_100"}, _fake_cuobjdump(tmp_path, listing)) == {
        "sm_100"
    }
    with pytest.raises(BuildCheckError, match=r"SASS for \['sm_100'\], expected exactly \['sm_120'\]"):
        buildtools.check_adam_wheel(wheel, "0.0.3", {"sm_120"}, _fake_cuobjdump(tmp_path, listing))


def test_the_host_build_targets_the_visible_blackwell_gpus(monkeypatch):
    """The GPU check and the bootstrap build adam-atan2 for what torch sees: no SM list in the code."""
    import torch

    caps = {0: (10, 0), 1: (10, 0)}
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: len(caps))
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda i: caps[i])
    assert buildtools.visible_gpu_archs() == "10.0"
    caps.update({0: (12, 0), 1: (8, 6)})
    assert buildtools.visible_gpu_archs() == "8.6;12.0"


def test_cuobjdump_listing_is_parsed():
    out = (
        "ELF file    1: adam_atan2_backend.1.sm_80.cubin\nELF file    2: adam_atan2_backend.2.sm_90a.cubin\n"
    )
    assert buildtools.parse_cuobjdump_elf(out) == {"sm_80", "sm_90a"}


def _wheel(path: Path, *, with_backend: bool = True) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("adam_atan2/__init__.py", "")
        if with_backend:
            zf.writestr("adam_atan2_backend.cpython-311-x86_64-linux-gnu.so", b"\x7fELF")
    return path


def _fake_cuobjdump(tmp_path: Path, listing: str) -> str:
    script = tmp_path / "cuobjdump"
    script.write_text(f"#!/bin/sh\nprintf '{listing}'\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return str(script)


def test_wheel_check_accepts_exactly_the_advertised_sass(tmp_path):
    wheel = _wheel(tmp_path / "adam_atan2-0.0.3-cp311-cp311-linux_x86_64.whl")
    tool = _fake_cuobjdump(tmp_path, "ELF file 1: x.sm_90.cubin\\n")
    assert buildtools.check_adam_wheel(wheel, "0.0.3", {"sm_90"}, tool) == {"sm_90"}


def test_wheel_check_rejects_extra_or_missing_sass(tmp_path):
    wheel = _wheel(tmp_path / "adam_atan2-0.0.3-cp311-cp311-linux_x86_64.whl")
    tool = _fake_cuobjdump(tmp_path, "ELF file 1: x.sm_80.cubin\\nELF file 2: x.sm_90.cubin\\n")
    with pytest.raises(BuildCheckError, match=r"SASS for \['sm_80', 'sm_90'\], expected exactly \['sm_90'\]"):
        buildtools.check_adam_wheel(wheel, "0.0.3", {"sm_90"}, tool)


def test_wheel_check_rejects_empty_or_misversioned_wheels(tmp_path):
    tool = _fake_cuobjdump(tmp_path, "")
    empty = _wheel(tmp_path / "adam_atan2-0.0.3-py3-none-any.whl", with_backend=False)
    with pytest.raises(BuildCheckError, match="no adam_atan2_backend extension"):
        buildtools.check_adam_wheel(empty, "0.0.3", {"sm_90"}, tool)
    zero = _wheel(tmp_path / "adam_atan2-0.0.0-cp311-cp311-linux_x86_64.whl")
    with pytest.raises(BuildCheckError, match=r"version is not 0\.0\.3"):
        buildtools.check_adam_wheel(zero, "0.0.3", {"sm_90"}, tool)


def test_cuda_home_is_completed_for_cpp_extension(tmp_path):
    home = tmp_path / "venv/lib/python3.11/site-packages/nvidia/cu13"
    (home / "bin").mkdir(parents=True)
    (home / "bin/nvcc").write_text("")
    (home / "lib").mkdir()
    (home / "lib/libcudart.so.13").write_text("")
    (home / "include").mkdir()
    for header in ("cublas_v2.h", "cusparse.h", "cusolverDn.h"):
        (home / "include" / header).write_text("")
    with pytest.raises(BuildCheckError, match=r"cuda_runtime\.h missing"):
        buildtools.find_cuda_home(tmp_path / "venv")
    (home / "include/cuda_runtime.h").write_text("")
    assert buildtools.find_cuda_home(tmp_path / "venv") == home
    assert (home / "lib64/libcudart.so").resolve() == (home / "lib/libcudart.so.13").resolve()


def _tree(root: Path) -> dict[str, int | str]:
    out: dict[str, int | str] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in filenames + dirnames:
            path = Path(dirpath, name)
            rel = str(path.relative_to(root))
            if path.is_symlink():
                out[rel] = "->" + os.readlink(path)
            elif path.is_file():
                out[rel] = path.stat().st_size
            elif not any(path.iterdir()):
                out[rel] = "empty"
    return out


def test_split_layers_moves_everything_within_the_budget(tmp_path):
    src = tmp_path / "opt/venv"
    (src / "lib/big").mkdir(parents=True)
    for i, size in enumerate([600, 500, 400, 300, 10]):
        (src / "lib/big" / f"f{i}").write_bytes(b"x" * size)
    (src / "bin").mkdir()
    (src / "bin/python").symlink_to("/usr/bin/python3")
    (src / "empty").mkdir()
    os.chmod(src / "bin", 0o750)
    before = _tree(src)
    dest = tmp_path / "layers"
    sizes = buildtools.split_layers(src, dest, 4, 700)
    assert max(sizes) <= 700 and sum(sizes) == 1810
    merged: dict[str, int | str] = {}
    for slot in range(4):
        root = dest / str(slot) / src.relative_to("/")
        if root.exists():
            assert (root / f".layer-{slot}").is_file()  # no slot is empty (classic-builder COPY bug)
            tree = _tree(root)
            merged.update(
                {k: v for k, v in tree.items() if (v != "empty" or k == "empty") and ".layer-" not in k}
            )
    assert merged == {k: v for k, v in before.items() if v != "empty" or k == "empty"}
    assert not any(p.is_file() for p in src.rglob("*"))
    slot_of_bin = next(s for s in range(4) if (dest / str(s) / src.relative_to("/") / "bin").exists())
    assert stat.S_IMODE((dest / str(slot_of_bin) / src.relative_to("/") / "bin").stat().st_mode) == 0o750


def test_split_layers_fails_when_the_tree_does_not_fit(tmp_path):
    src = tmp_path / "opt/venv"
    src.mkdir(parents=True)
    (src / "huge").write_bytes(b"x" * 800)
    with pytest.raises(BuildCheckError, match="does not fit in 2 layers"):
        buildtools.split_layers(src, tmp_path / "layers", 2, 700)


def test_runtime_check_requires_the_c_build_triton_does(tmp_path, monkeypatch):
    """Triton (torch.compile on GPU) compiles C helpers at run time: no compiler must fail the build."""
    empty = tmp_path / "empty"
    empty.mkdir()
    env = {"PATH": str(empty)}
    assert buildtools.find_c_compiler(env) is None
    with pytest.raises(BuildCheckError, match=r"no C compiler .*gcc, libc6-dev and the Python headers"):
        buildtools.build_probe(tmp_path, env)
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.delenv("CC", raising=False)
    with pytest.raises(BuildCheckError, match="no C compiler"):
        buildtools.check_runtime([])


def test_compiler_lookup_follows_triton_cc_then_gcc_then_clang(tmp_path):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for name in ("clang", "gcc"):
        (bindir / name).write_text("#!/bin/sh\n")
        (bindir / name).chmod(0o755)
    assert buildtools.find_c_compiler({"PATH": str(bindir)}) == str(bindir / "gcc")
    (bindir / "gcc").unlink()
    assert buildtools.find_c_compiler({"PATH": str(bindir)}) == str(bindir / "clang")
    assert buildtools.find_c_compiler({"PATH": str(bindir), "CC": "/opt/cc"}) == "/opt/cc"


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc on the test host")
def test_probe_is_a_real_c_extension_build_and_import(tmp_path):
    cc, how = buildtools.build_probe(tmp_path, dict(os.environ))
    assert Path(cc).name in ("gcc", "clang") or cc == os.environ.get("CC")
    assert "-shared -fPIC" in how or how == "triton.runtime.build._build"
    assert list(tmp_path.glob(f"{buildtools.PROBE_MODULE}*.so"))


def test_probe_compile_error_names_the_fix(tmp_path):
    broken = tmp_path / "cc"
    broken.write_text("#!/bin/sh\necho 'fatal error: Python.h: No such file' >&2\nexit 1\n")
    broken.chmod(0o755)
    env = {"PATH": os.environ["PATH"], "CC": str(broken)}
    with pytest.raises(BuildCheckError, match=r"(?s)failed.*full python image"):
        buildtools.build_probe(tmp_path, env)


def test_gpu_runtime_check_requires_the_nvidia_container_variables(monkeypatch):
    monkeypatch.setattr(buildtools, "check_cc", lambda: "cc ok")
    env = {"PATH": "/usr/bin:/bin", "NVIDIA_VISIBLE_DEVICES": "all"}
    with pytest.raises(BuildCheckError, match="NVIDIA_DRIVER_CAPABILITIES=None, needs 'compute,utility'"):
        buildtools.check_runtime(["sm_90"], env)


def test_main_reports_failures_with_exit_1(tmp_path, capsys):
    lock = tmp_path / "lock.txt"
    lock.write_text(LOCK)
    assert venvtools.main(["subset-lock", str(lock), "pip"]) == 0
    assert capsys.readouterr().out.startswith("pip==26.3")
    assert venvtools.main(["subset-lock", str(lock), "nope"]) == 1
    assert "build check failed: lock file has no pin for nope" in capsys.readouterr().err


def test_split_layers_link_mode_keeps_the_source(tmp_path):
    src = tmp_path / "opt/venv"
    (src / "lib").mkdir(parents=True)
    (src / "lib/a").write_bytes(b"x" * 300)
    (src / "lib/b").write_bytes(b"y" * 300)
    (src / "python").symlink_to("lib/a")
    sizes = buildtools.split_layers(src, tmp_path / "layers", 2, 400, link=True)
    assert sorted(sizes) == [300, 300]
    assert (src / "lib/a").read_bytes() == b"x" * 300 and (src / "python").is_symlink()
    assert len(list((tmp_path / "layers").rglob(".layer-*"))) == 2
    copies = sorted((tmp_path / "layers").rglob("a"))
    assert len(copies) == 1 and copies[0].stat().st_ino == (src / "lib/a").stat().st_ino
    links = [p for p in (tmp_path / "layers").rglob("python") if p.is_symlink()]
    assert [os.readlink(p) for p in links] == ["lib/a"]


def test_sdist_with_path_traversal_is_refused(tmp_path, monkeypatch):
    import io
    import tarfile
    import tempfile

    scratch = tmp_path / "tmp"  # the build's temporary folder goes here: it must not outlive the failure
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))

    sdist = tmp_path / "adam_atan2-0.0.3.tar.gz"
    with tarfile.open(sdist, "w:gz") as tar:
        data = b"x"
        info = tarfile.TarInfo("../evil")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    lock = tmp_path / "build.txt"
    lock.write_text(f"adam-atan2==0.0.3 \\\n    --hash=sha256:{buildtools.sha256_of(sdist)}\n")
    venv = tmp_path / "venv/lib/python3.11/site-packages/nvidia/cu13"
    for rel in ("bin/nvcc", "bin/cuobjdump", "lib/libcudart.so.13"):
        (venv / rel).parent.mkdir(parents=True, exist_ok=True)
        (venv / rel).write_text("")
    for header in ("cublas_v2.h", "cusparse.h", "cusolverDn.h", "cuda_runtime.h"):
        (venv / "include").mkdir(exist_ok=True)
        (venv / "include" / header).write_text("")
    with pytest.raises(BuildCheckError, match=r"refusing to extract '\.\./evil'"):
        buildtools.build_adam_atan2(sdist, lock, "9.0", tmp_path / "out", "0.0.3", tmp_path / "venv", 1)
    assert not (tmp_path / "evil").exists()
    assert list(scratch.iterdir()) == []  # its unpacking folder removed on the failure too


def _facts(**changes: str) -> dict[str, str]:
    facts = venvtools.python_facts()
    facts.update(changes)
    return facts


def test_python_facts_name_what_a_venv_depends_on():
    facts = venvtools.python_facts()
    assert set(venvtools.PYTHON_FACTS) <= set(facts)
    assert facts["version"].startswith(f"{sys.version_info.major}.{sys.version_info.minor}.")
    assert facts["soabi"].startswith("cpython-3")
    assert Path(facts["executable"]).is_file()


def test_interpreters_differing_only_in_build_date_are_accepted(tmp_path):
    """The official full and slim images compile one CPython release separately: only the date differs."""
    built = _facts(build="main Jun  1 2020 01:02:03")
    assert built != venvtools.python_facts()
    (tmp_path / "facts.json").write_text(json.dumps(built))
    note = venvtools.check_python(tmp_path / "facts.json")
    assert "matches the build base" in note and "does not matter" in note
    assert venvtools.python_mismatches(built, venvtools.python_facts()) == []


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("version", "3.12.7-final0"),
        ("soabi", "cpython-312-x86_64-linux-gnu"),
        ("executable", "/usr/bin/python3.11"),
        ("prefix", "/opt/other-python"),
    ],
)
def test_interpreters_differing_in_what_the_venv_needs_are_refused(tmp_path, key, value, capsys):
    facts_file = tmp_path / "facts.json"
    facts_file.write_text(json.dumps(_facts(**{key: value})))
    with pytest.raises(BuildCheckError, match=rf"{key} \(.*build base '{re.escape(value)}'") as err:
        venvtools.check_python(facts_file)
    assert "docker/images.toml" in str(err.value) and "same CPython release" in str(err.value)
    assert venvtools.main(["check-python", str(facts_file)]) == 1
    assert capsys.readouterr().err.startswith("build check failed: the runtime base's Python cannot run")


def test_python_facts_round_trip_through_the_cli(tmp_path, capsys):
    out = tmp_path / "venv/.python-built.json"
    assert venvtools.main(["python-facts", str(out)]) == 0
    assert json.loads(out.read_text()) == venvtools.python_facts()
    assert venvtools.main(["check-python", str(out)]) == 0
    assert "matches the build base" in capsys.readouterr().out
    assert list(out.parent.iterdir()) == [out]  # written atomically: no temporary left


def test_unreadable_or_foreign_facts_are_a_clear_build_error(tmp_path):
    with pytest.raises(BuildCheckError, match="cannot read the build base's interpreter facts"):
        venvtools.check_python(tmp_path / "missing.json")
    (tmp_path / "old.json").write_text('"3.11.2 (main, Mar 13 2023) [GCC 12.2.0]"')
    with pytest.raises(BuildCheckError, match="rebuild without cache"):
        venvtools.check_python(tmp_path / "old.json")


def test_dockerfile_compares_interpreter_facts_not_sys_version():
    dockerfile = (Path(__file__).resolve().parents[2] / "docker/Dockerfile").read_text()
    assert "print(sys.version)" not in dockerfile
    assert "venvtools.py python-facts /opt/venv/.python-built.json" in dockerfile
    assert "venvtools.py check-python /opt/venv/.python-built.json" in dockerfile


def _other_interpreter() -> str | None:
    """A second CPython on this machine (e.g. the distribution's python3 next to a pyenv one)."""
    mine = os.path.realpath(sys.executable)
    for candidate in ("/usr/bin/python3", "/usr/local/bin/python3"):
        if os.path.exists(candidate) and os.path.realpath(candidate) != mine:
            return candidate
    return None


@pytest.mark.skipif(_other_interpreter() is None, reason="needs a second CPython installation")
def test_facts_recorded_by_another_real_interpreter_are_refused(tmp_path):
    """The build step runs venvtools.py as a script under the base's python3: do that with a real other one."""
    facts = tmp_path / ".python-built.json"
    script = Path(venvtools.__file__)
    subprocess.run([_other_interpreter(), str(script), "python-facts", str(facts)], check=True)
    with pytest.raises(BuildCheckError, match=r"executable .*build base") as err:
        venvtools.check_python(facts)
    assert "same CPython release" in str(err.value)


# The lines of adam-atan2 0.0.3's setup.py that the host build changes (arch flags, setuptools_scm).
SDIST_SETUP_PY = (
    SETUP_PY
    + """setuptools.setup(
    name="adam_atan2",
    use_scm_version=True,
    setup_requires=['setuptools_scm'],
    ext_modules=ext_modules,
)
"""
)

# Stands in for the host's Python: records how pip was called and "installs" a backend module + SASS.
FAKE_PYTHON = """import json, os, sys
from pathlib import Path
args = sys.argv[1:]
src = Path(args[-1])
record = {"args": args, "env": {k: os.environ.get(k) for k in ("TORCH_CUDA_ARCH_LIST", "MAX_JOBS", "CUDA_HOME")},
          "setup": (src / "setup.py").read_text()}
Path(os.environ["FAKE_RECORD"]).write_text(json.dumps(record))
target = Path(args[args.index("--target") + 1])
target.mkdir(parents=True, exist_ok=True)
(target / "adam_atan2_backend.cpython-312-x86_64-linux-gnu.so").write_text("sm_90")
"""


def _sdist(tmp_path: Path) -> Path:
    import io
    import tarfile

    sdist = tmp_path / "adam_atan2-0.0.3.tar.gz"
    with tarfile.open(sdist, "w:gz") as tar:
        for name, text in (
            ("setup.py", SDIST_SETUP_PY),
            ("PKG-INFO", "Name: adam_atan2\nVersion: 0.0.3\n"),
            ("adam_atan2/adam_atan2.py", ADAM_STEP),
        ):
            data = text.encode()
            info = tarfile.TarInfo(f"adam_atan2-0.0.3/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return sdist


def _host_tools(tmp_path: Path, *, ninja: bool) -> Path:
    bin_dir = tmp_path / "cuda/bin"
    bin_dir.mkdir(parents=True)
    tools = {"nvcc": "exit 0", "cuobjdump": 'echo "ELF file    1: x.sm_90.cubin"'}
    if ninja:
        tools["ninja"] = "exit 0"
    for name, body in tools.items():
        (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / name).chmod(0o755)
    return bin_dir


@pytest.mark.parametrize("ninja", [True, False])
def test_host_install_builds_offline_for_one_sm_with_the_hosts_torch(tmp_path, ninja):
    python = tmp_path / "python"
    python.write_text(f"#!{sys.executable}\n{FAKE_PYTHON}")
    python.chmod(0o755)
    bin_dir = _host_tools(tmp_path, ninja=ninja)
    record = tmp_path / "record.json"
    env = {"PATH": str(bin_dir), "FAKE_RECORD": str(record)}  # this machine's own ninja stays out of it
    target = tmp_path / "site"
    notes = buildtools.install_adam_atan2(
        _sdist(tmp_path), "9.0", target=target, python=str(python), jobs=16, env=env
    )
    seen = json.loads(record.read_text())
    assert seen["args"][:2] == ["-m", "pip"] and "install" in seen["args"]
    for flag in ("--no-build-isolation", "--no-index", "--no-deps"):
        assert flag in seen["args"]
    assert seen["env"] == {
        "TORCH_CUDA_ARCH_LIST": "9.0",
        "MAX_JOBS": "16",
        "CUDA_HOME": str(tmp_path / "cuda"),
    }
    # One SM from TORCH_CUDA_ARCH_LIST, and no setuptools_scm to fetch: the version is the sdist's.
    assert "nvcc_flags_with_arch," not in seen["setup"] and '"nvcc": NVCC_FLAGS,' in seen["setup"]
    assert "setuptools_scm" not in seen["setup"] and "version='0.0.3'," in seen["setup"]
    assert notes[0].endswith(", ninja" if ninja else ", no ninja on PATH (one file at a time)")
    assert "SASS ['sm_90'] (cuobjdump)" in notes


def test_host_install_names_what_is_missing(tmp_path):
    with pytest.raises(BuildCheckError, match="torch sees no CUDA GPU here; pass --archs"):
        buildtools.install_adam_atan2(_sdist(tmp_path), "", env={"PATH": "/usr/bin:/bin"})
    with pytest.raises(BuildCheckError, match="no nvcc on PATH and CUDA_HOME unset"):
        buildtools.install_adam_atan2(_sdist(tmp_path), "9.0", env={"PATH": str(tmp_path)})
    with pytest.raises(BuildCheckError, match="setuptools_scm lines"):
        buildtools.pin_adam_version(SETUP_PY, "0.0.3")


def test_every_build_instruction_points_at_the_patched_build(capsys):
    """Users are told one way to build the extension by hand: ours (a plain `pip install adam-atan2` builds
    four fixed SMs serially and fetches setuptools_scm, so it fails offline)."""
    from trm.optim.backend import EXTENSION_INSTALL

    root = Path(__file__).resolve().parents[2]
    assert EXTENSION_INSTALL.startswith("python -m trm.images.buildtools install-adam-atan2 --sdist ")
    with pytest.raises(SystemExit) as info:
        buildtools.main(["install-adam-atan2", "--help"])
    assert info.value.code == 0 and "--target" in capsys.readouterr().out
    plain = re.compile(r"pip install[^`\n]*adam[-_]atan2(==|-0\.0\.3\.tar)")  # a command, not a cause
    texts = [
        *root.glob("trm/**/*.py"),
        *reference_pages(root),  # the READMEs and docs/
        *root.glob("runbooks/**/*.md"),
        *root.glob("docker/*.md"),
    ]
    offenders = [str(p.relative_to(root)) for p in texts if plain.search(p.read_text(encoding="utf-8"))]
    assert offenders == []


@pytest.mark.parametrize(
    ("backend", "wanted", "unwanted"),
    [("ext", "import adam_atan2, adam_atan2_backend", "find_spec"),
     ("torch", "find_spec('adam_atan2_backend') is None", "import adam_atan2")],
)  # fmt: skip
def test_runtime_check_matches_the_labelled_optimizer_backend(monkeypatch, backend, wanted, unwanted):
    """A GPU image labelled optimizer-backend=torch (the CUDA 12.8 family) must not carry the extension, one
    labelled ext must import it; a mismatch fails the build naming the backend."""
    monkeypatch.setattr(buildtools, "check_cc", lambda: "cc ok")
    exists = os.path.exists  # this test host may have a system CUDA, which the image must not
    monkeypatch.setattr(
        buildtools.os.path,
        "exists",
        lambda p: (
            not str(p).startswith(("/usr/local/cuda", "/usr/lib/x86_64-linux-gnu/libcudart")) and exists(p)
        ),
    )
    env = {"PATH": "/usr/bin:/bin", **buildtools.NVIDIA_ENV}
    probes = []

    def run(cmd, *args, **kwargs):
        probes.append(cmd[-1])
        return subprocess.CompletedProcess(cmd, 0)

    monkeypatch.setattr(buildtools.subprocess, "run", run)
    buildtools.check_runtime(["sm_90"], env, optimizer_backend=backend)
    assert wanted in probes[-1] and unwanted not in probes[-1] and "assert torch.version.cuda" in probes[-1]
    monkeypatch.setattr(
        buildtools.subprocess, "run", lambda cmd, *a, **k: subprocess.CompletedProcess(cmd, 1)
    )
    with pytest.raises(BuildCheckError, match=f"optimizer backend '{backend}'"):
        buildtools.check_runtime(["sm_90"], env, optimizer_backend=backend)


# adam-atan2 0.0.3's AdamATan2.step() opening, as its sdist has it.
ADAM_STEP = '''
class AdamATan2(Base):
    def step(self):
        """Perform a single optimization step.
        """
        self._cuda_graph_capture_health_check()
        return "stepped"
'''


@pytest.mark.parametrize(
    "names",
    [
        ("_accelerator_graph_capture_health_check",),  # torch 2.11: the old name is gone
        ("_cuda_graph_capture_health_check",),  # torch 2.10
        ("_accelerator_graph_capture_health_check", "_cuda_graph_capture_health_check"),  # torch 2.13
    ],
)
def test_the_patched_adam_step_calls_whichever_health_check_this_torch_has(names) -> None:
    called: list[str] = []
    base = type("Base", (), {n: (lambda self, n=n: called.append(n)) for n in names})
    namespace: dict = {"Base": base}
    exec(buildtools.patch_adam_optimizer(ADAM_STEP), namespace)
    assert namespace["AdamATan2"]().step() == "stepped"
    assert called == [names[0]]
    unpatched: dict = {"Base": base}
    exec(ADAM_STEP, unpatched)
    if "_cuda_graph_capture_health_check" not in names:  # the bug the patch fixes
        with pytest.raises(AttributeError, match="_cuda_graph_capture_health_check"):
            unpatched["AdamATan2"]().step()
    with pytest.raises(buildtools.BuildCheckError, match="update patch_adam_optimizer"):
        buildtools.patch_adam_optimizer(buildtools.patch_adam_optimizer(ADAM_STEP))
