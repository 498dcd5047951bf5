"""docker/images.toml, the generated tag table, the lock files and the build context (no engine)."""

from __future__ import annotations

import io
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from tools.images import context, docs, requirements
from tools.images.variants import load_config
from trm.errors import TRMError

ROOT = Path(__file__).resolve().parents[3]
CONFIG = ROOT / "docker/images.toml"
DIGEST = "@sha256:" + "a" * 64


FAMILIES = (
    '[families.cu130]\ncuda = "13.0"\ntorch = "2.13.0"\nmin_driver = 580\noptimizer_backend = "ext"\n'
    '[families.cu126]\ncuda = "12.6"\ntorch = "2.13.0"\nmin_driver = 525\noptimizer_backend = "torch"\n'
)


def write_config(
    tmp_path: Path,
    variants: str,
    *,
    runtime_base: str = "python:3.11-slim" + DIGEST,
    families: str = FAMILIES,
) -> Path:
    path = tmp_path / "images.toml"
    path.write_text(
        f"""
[image]
repository = "trm"
python = "3.11"
torch = "2.13.0"
adam_atan2 = "0.0.3"
build_base = "python:3.11{DIGEST}"
runtime_base = "{runtime_base}"
max_layer_bytes = 1000
[smoke]
command = ["python", "-m", "trm", "version"]
preflight_args = "--cpu"
{families}
{variants}
"""
    )
    return path


GPU = '[variants.sm90]\ndescription = "H100"\nlock = "cu130"\narchs = ["9.0"]\nextras = []\n'
CPU = '[variants.cpu]\ndescription = "CPU"\nlock = "cpu"\narchs = []\nextras = []\n'


def test_repo_config_has_both_gpu_families_with_pinned_bases():
    config = load_config(CONFIG)
    assert list(config.variants) == [
        "cpu", "sm90", "sm80", "sm89", "sm100", "sm120",
        "sm90-cu128", "sm80-cu128", "sm89-cu128", "sm100-cu128", "sm120-cu128",
    ]  # fmt: skip
    for name in ("sm90", "sm80", "sm89", "sm100", "sm120"):
        new, old = config.variants[name], config.variants[f"{name}-cu128"]
        assert (new.cuda, new.torch, new.optimizer_backend) == ("13.0", "2.13.0", "ext")
        assert (old.cuda, old.torch, old.optimizer_backend) == ("12.8", "2.10.0", "torch")
        assert new.archs == old.archs and new.extras == old.extras == ("hub", "sync", "tensorboard", "wandb")
        # R525+ drivers start the CUDA 12.8 images (minor-version compatibility), R580+ the 13.0 ones;
        # Blackwell GPUs need CUDA 12.8's own driver (570.26, R570), so their 12.8 images ask for it
        blackwell = name in ("sm100", "sm120")
        assert old.container_env["NVIDIA_REQUIRE_CUDA"] == ("cuda>=12.8" if blackwell else "cuda>=12.0")
        assert old.min_driver == ("570.26" if blackwell else "525.60.13")
        assert new.container_env["NVIDIA_REQUIRE_CUDA"] == "cuda>=13.0" and new.min_driver == "580.65.06"
    assert config.variants["sm100"].sm_list == ("sm_100",) and config.variants["sm120"].sm_list == ("sm_120",)
    assert config.variants["cpu"].torch == config.torch
    assert config.variants["sm90"].sm_list == ("sm_90",)
    assert config.variants["sm80"].archs == ("8.0",)
    assert config.variants["sm89"].sm_list == ("sm_89",)
    # One full CPython image for both stages: the venv moves unchanged, and the runtime keeps the C
    # toolchain torch.compile's Triton needs (the slim image has no gcc, libc headers or Python.h).
    for variant in config.variants.values():
        assert variant.build_base == variant.runtime_base
        assert variant.runtime_base.startswith("python:3.11-bookworm@")
    for variant in config.variants.values():
        assert "@sha256:" in variant.build_base and "@sha256:" in variant.runtime_base


def test_tags_carry_version_cuda_and_sm():
    config = load_config(CONFIG)
    assert config.variants["sm90"].version_tag("0.1.0") == "0.1.0-cu130-sm90"
    assert config.variants["cpu"].version_tag("0.1.0") == "0.1.0-cpu"
    assert config.variants["sm80"].content_tag("0123456789abcdef" * 4) == "sm80-0123456789ab"


def test_unknown_variant_names_the_known_ones():
    config = load_config(CONFIG)
    with pytest.raises(TRMError, match=r"unknown image variant 'sm75'.*cpu, sm90, sm80, sm89"):
        config.select(["sm90", "sm75"])
    assert [v.name for v in config.select(["sm89", "cpu", "sm89"])] == ["sm89", "cpu"]


def test_base_without_digest_is_rejected(tmp_path):
    path = write_config(tmp_path, CPU, runtime_base="python:3.11-slim-bookworm")
    with pytest.raises(TRMError, match=r"runtime_base.*not pinned by digest"):
        load_config(path)


def test_gpu_variant_needs_a_family_lock_and_archs(tmp_path):
    path = write_config(tmp_path, GPU.replace('lock = "cu130"', 'lock = "cu999"'))
    with pytest.raises(
        TRMError, match=r"\[variants.sm90\] has lock='cu999'.*\[families.<name>\] table \(cu130, cu126\)"
    ):
        load_config(path)
    path = write_config(tmp_path, CPU.replace('lock = "cpu"', 'lock = "cu130"'))
    with pytest.raises(TRMError, match=r"a CPU variant neither"):
        load_config(path)


def test_variant_cuda_key_points_at_the_family(tmp_path):
    path = write_config(tmp_path, GPU.replace('lock = "cu130"', 'cuda = "13.0"\nlock = "cu130"'))
    with pytest.raises(TRMError, match=r"\[variants.sm90\].cuda is no longer read.*\[families.cu130\].cuda"):
        load_config(path)


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ("min_driver = 580", r"\[families.cu130\] is missing the key 'min_driver'"),
        ('optimizer_backend = "ext"', r"\[families.cu130\] is missing the key 'optimizer_backend'"),
        ('cuda = "13.0"', r"\[families.cu130\] is missing the key 'cuda'"),
    ],
)
def test_family_keys_are_required(tmp_path, bad, message):
    path = write_config(tmp_path, GPU, families=FAMILIES.replace(bad + "\n", "", 1))
    with pytest.raises(TRMError, match=message):
        load_config(path)


def test_family_values_are_checked(tmp_path):
    for old, new, message in (
        ("min_driver = 580", "min_driver = 58", r"min_driver = 58; write the driver branch"),
        ('optimizer_backend = "ext"', 'optimizer_backend = "cuda"', r"optimizer_backend = 'cuda'; use 'ext'"),
        ('cuda = "13.0"', 'cuda = "13"', r"cuda = '13'; write the CUDA release like '12.8'"),
    ):
        path = write_config(tmp_path, GPU, families=FAMILIES.replace(old, new, 1))
        with pytest.raises(TRMError, match=message):
            load_config(path)


def test_variants_sharing_a_lock_must_share_extras(tmp_path):
    other = GPU.replace("sm90", "sm80").replace("9.0", "8.0").replace("extras = []", 'extras = ["wandb"]')
    path = write_config(tmp_path, GPU + other)
    with pytest.raises(TRMError, match=r"share a lock must share extras"):
        load_config(path)


def test_docs_table_is_fresh():
    """Fails when docker/images.toml changed without `python -m tools.images docs`."""
    config = load_config(CONFIG)
    assert docs.write_image_tables(config, context.project_version(ROOT), ROOT, check=True) == []
    docs.write_catalog(config, context.project_version(ROOT), ROOT / docs.CATALOG_PATH, check=True)
    assert docs.write_driver_tables(config, ROOT, check=True) == []


def test_driver_table_rows_follow_the_families(tmp_path):
    config = load_config(CONFIG)
    table = docs.render_driver_table(config)
    assert (
        "| R580 or newer | `sm90`, `sm80`, `sm89`, `sm100`, `sm120` | 13.0 | 2.13.0 | adam-atan2 extension |"
        in table
    )
    assert (
        "| R525 to R579 | `sm90-cu128`, `sm80-cu128`, `sm89-cu128`, `sm100-cu128` (R570+), `sm120-cu128` (R570+) "
        "| 12.8 | 2.10.0 | trm AdamATan2 (torch) |" in table
    )
    assert "| older than R525 | none:" in table
    for rel in docs.DRIVER_TABLE_PATHS:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(f"x\n{docs.DRIVER_BEGIN}\nold\n{docs.DRIVER_END}\ny\n")
    with pytest.raises(
        TRMError, match=r"driver table in \S*docs/images.md is stale: run `python -m tools.images docs`"
    ):
        docs.write_driver_tables(config, tmp_path, check=True)
    assert docs.write_driver_tables(config, tmp_path) == list(docs.DRIVER_TABLE_PATHS)
    assert table in (tmp_path / "runbooks/v1/08-troubleshooting.md").read_text()


def test_catalog_check_detects_a_stale_catalog(tmp_path):
    config = load_config(CONFIG)
    path = tmp_path / "catalog.py"
    assert docs.write_catalog(config, "0.1.0", path) is True
    namespace: dict = {}
    exec(path.read_text(), namespace)
    assert [v[0] for v in namespace["VARIANTS"]] == [n for n, v in config.variants.items() if v.is_gpu]
    assert docs.write_catalog(config, "0.1.0", path, check=True) is False
    with pytest.raises(TRMError, match=r"stale: run `python -m tools\.images docs`"):
        docs.write_catalog(config, "0.2.0", path, check=True)


def test_docs_check_detects_a_stale_table(tmp_path):
    config = load_config(CONFIG)
    readme = tmp_path / "README.md"
    readme.write_text(f"intro\n{docs.BEGIN}\n| old |\n{docs.END}\noutro\n")
    with pytest.raises(TRMError, match="stale"):
        docs.write_docs(config, "0.1.0", readme, check=True)
    assert docs.write_docs(config, "0.1.0", readme) is True
    text = readme.read_text()
    assert "`trm:0.1.0-cu130-sm89`" in text and "| old |" not in text
    assert text.startswith("intro\n") and text.endswith("outro\n")
    assert docs.write_docs(config, "0.1.0", readme) is False


def test_docs_markers_are_required(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("no markers\n")
    with pytest.raises(TRMError, match="markers"):
        docs.write_docs(load_config(CONFIG), "0.1.0", readme)


def test_lock_files_pin_the_right_torch_with_hashes():
    config = load_config(CONFIG)
    for variant in config.variants.values():
        requirements.check_torch_pin(config, variant, ROOT)
    cu = requirements.read_pins(requirements.build_lock(ROOT, "cu130"))
    assert cu["adam-atan2"] == config.adam_atan2
    assert cu["nvidia-cuda-nvcc"].startswith("13.0.")
    runtime = requirements.read_pins(requirements.runtime_lock(ROOT, "cu130"))
    # Packages shared by torch and the compiler toolchain are the same build.
    assert cu["nvidia-cuda-runtime"] == runtime["nvidia-cuda-runtime"]
    for path in (ROOT / requirements.REQUIREMENTS_DIR).glob("*.txt"):
        text = path.read_text()
        assert text.count("==") <= text.count("--hash=sha256:"), path


def test_wrong_torch_pin_is_reported(tmp_path):
    config = load_config(CONFIG)
    lock_dir = tmp_path / requirements.REQUIREMENTS_DIR
    lock_dir.mkdir(parents=True)
    (lock_dir / "runtime-cu130.txt").write_text("torch==2.13.0+cpu \\\n    --hash=sha256:00\n")
    with pytest.raises(TRMError, match=r"pins torch==2.13.0\+cpu but variant 'sm90' needs torch==2.13.0 "):
        requirements.check_torch_pin(config, config.variants["sm90"], tmp_path)


def test_gpu_locks_are_compiled_without_local_find_links(tmp_path, monkeypatch):
    """A local `+cpu` wheel satisfies `torch==2.13.0`, so GPU locks must not see it."""
    config = load_config(CONFIG)
    calls = []
    monkeypatch.setenv("PIP_FIND_LINKS", "/somewhere/wheels")
    monkeypatch.setattr(requirements, "_uv", lambda root: ["uv"])
    monkeypatch.setattr(
        requirements.subprocess,
        "run",
        lambda cmd, cwd: calls.append(cmd) or subprocess.CompletedProcess(cmd, 0),
    )
    requirements.compile_locks(config, config.select(["cpu", "sm90", "sm80"]), ROOT)
    assert len(calls) == 4  # runtime + build for each of the two lock groups
    cpu_calls, gpu_calls = calls[:2], calls[2:]
    assert all("/somewhere/wheels" in c for c in cpu_calls)
    assert not any("/somewhere/wheels" in c for c in gpu_calls)
    assert str(requirements.runtime_lock(ROOT, "cu130")) in gpu_calls[1]  # build lock constrained by runtime


def test_wheelhouse_download_is_hash_checked_for_the_image_platform():
    cmd = requirements.download_command(Path("lock.txt"), Path("out"), "3.11")
    assert {"--require-hashes", "--no-deps"} <= set(cmd)
    assert cmd[cmd.index("--python-version") + 1] == "3.11"
    assert "manylinux_2_28_x86_64" in cmd and "cp311" in cmd


def _fake_checkout(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    for rel in ("docker/Dockerfile", "pyproject.toml", "README.md", "trm/__init__.py"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(rel)
    (root / "pyproject.toml").write_text('[project]\nname = "x"\nversion = "1.2.3"\n')
    for lock in ("cpu", "cu130"):
        for kind in ("runtime", "build"):
            path = root / f"docker/requirements/{kind}-{lock}.txt"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(f"{kind} {lock}\n")
        (root / f"docker/wheelhouse/{lock}").mkdir(parents=True)
        (root / f"docker/wheelhouse/{lock}/pkg-{lock}.whl").write_bytes(b"w")
    (root / "trm/__pycache__").mkdir()
    (root / "trm/__pycache__/x.pyc").write_bytes(b"junk")
    return root


def test_context_holds_only_the_variants_inputs(tmp_path):
    root = _fake_checkout(tmp_path)
    config = load_config(CONFIG)
    buf = io.BytesIO()
    context.write_context(config.variants["cpu"], root, buf)
    buf.seek(0)
    with tarfile.open(fileobj=buf) as tar:
        names = set(tar.getnames())
        assert all(m.mtime == 0 and m.uid == 0 for m in tar.getmembers())
    assert "docker/wheelhouse/cpu/pkg-cpu.whl" in names
    assert "docker/requirements/runtime-cpu.txt" in names
    assert not any("cu130" in n or "__pycache__" in n for n in names)


@pytest.mark.parametrize("name", ["trm/.env", "trm/deploy/.env.prod", "trm/keys/server.PEM", "trm/.netrc",
                                  "trm/hub/credentials.json", "trm/.git-credentials"])  # fmt: skip
def test_a_credential_file_in_the_source_tree_stops_the_build(tmp_path, name):
    """The context is an explicit list (never the repository root: no runs/, data/ or .env there), but every
    file under trm/ goes in: one named like a credential is refused before anything is built or pushed."""
    root = _fake_checkout(tmp_path)
    (root / name).parent.mkdir(parents=True, exist_ok=True)
    (root / name).write_text("HF_TOKEN=x\n")
    variant = load_config(CONFIG).variants["cpu"]
    with pytest.raises(TRMError, match=r"named like a credential file") as err:
        context.write_context(variant, root, io.BytesIO())
    assert str(root / name) in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(TRMError, match=r"named like a credential file"):
        context.content_hash(variant, root, {})
    (root / name).unlink()
    (root / "trm/keys.py").write_text("KEYS = ()\n")  # a module about keys is source, not a credential
    assert "trm/keys.py" in {p.as_posix() for p in context.hashed_files(variant, root)}


def test_content_hash_follows_inputs_not_labels(tmp_path):
    root = _fake_checkout(tmp_path)
    variant = load_config(CONFIG).variants["sm90"]
    args = {"LOCK": "cu130", "GIT_SHA": "abc"}
    base = context.content_hash(variant, root, args)
    assert context.content_hash(variant, root, {**args, "GIT_SHA": "def"}) == base
    assert context.content_hash(variant, root, {**args, "RUNTIME_BASE": "other"}) != base
    (root / "trm/__init__.py").write_text("changed")
    assert context.content_hash(variant, root, args) != base


def test_empty_wheelhouse_says_to_run_make_wheelhouse(tmp_path):
    root = _fake_checkout(tmp_path)
    (root / "docker/wheelhouse/cpu/pkg-cpu.whl").unlink()
    with pytest.raises(TRMError, match=r"make wheelhouse VARIANTS=cpu"):
        context.write_context(load_config(CONFIG).variants["cpu"], root, io.BytesIO())


def test_build_args_describe_the_variant():
    config = load_config(CONFIG)
    args = context.build_args(config, config.variants["sm89"], ROOT, runtime_base="trm-base:bookworm")
    assert args["CUDA_ARCHS"] == "8.9" and args["SM_LIST"] == "sm_89" and args["LOCK"] == "cu130"
    assert args["RUNTIME_BASE"] == "trm-base:bookworm"
    assert args["BUILD_BASE"] == config.variants["sm89"].build_base
    assert args["TRM_VERSION"] == context.project_version(ROOT)


def test_cli_unknown_variant_exits_2_without_traceback():
    proc = subprocess.run(
        [sys.executable, "-m", "tools.images", "build", "--variants", "sm75"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2
    assert "unknown image variant 'sm75'" in proc.stderr and "Traceback" not in proc.stderr


def test_runtime_locks_cover_every_project_dependency():
    """A dependency added to pyproject.toml without `make lock` would be missing from the images."""
    import tomllib

    with open(ROOT / "pyproject.toml", "rb") as f:
        deps = tomllib.load(f)["project"]["dependencies"]
    for lock in ("cpu", "cu130"):
        pins = requirements.read_pins(requirements.runtime_lock(ROOT, lock))
        for dep in deps:
            name, _, version = dep.partition("==")
            key = requirements.normalize_name(name)
            assert key in pins, f"{dep} is not in runtime-{lock}.txt: run `make lock`"
            assert pins[key].split("+")[0] == version, (
                f"{dep} vs {pins[key]} in runtime-{lock}.txt: run `make lock`"
            )


def test_gpu_runtime_images_ask_the_container_toolkit_for_compute():
    """Without NVIDIA_DRIVER_CAPABILITIES=compute a runtime defaulting to `utility` hides libcuda."""
    config = load_config(CONFIG)
    for variant in config.variants.values():
        args = context.build_args(config, variant, ROOT)
        if variant.is_gpu:
            assert args["NVIDIA_VISIBLE_DEVICES"] == "all"
            assert args["NVIDIA_DRIVER_CAPABILITIES"] == "compute,utility"
            assert args["NVIDIA_REQUIRE_CUDA"] == f"cuda>={variant.driver_cuda_floor}"
            assert variant.driver_cuda_floor in (f"{variant.cuda.split('.')[0]}.0", "12.8")
        else:
            assert args["NVIDIA_VISIBLE_DEVICES"] == args["NVIDIA_DRIVER_CAPABILITIES"] == ""
    dockerfile = (ROOT / context.DOCKERFILE).read_text()
    runtime = dockerfile[dockerfile.index("AS runtime") :]
    # The runtime stage turns the arguments into the image's environment before its checks run.
    env_block = runtime[runtime.index("ENV NVIDIA_VISIBLE_DEVICES") : runtime.index("RUN python3")]
    for key in ("NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES", "NVIDIA_REQUIRE_CUDA"):
        assert f"ARG {key}=" in runtime and f"{key}=${{{key}}}" in env_block


CU126 = (
    '[variants.sm90-cu126]\ndescription = "H100 on CUDA 12 drivers"\nlock = "cu126"\n'
    'archs = ["9.0"]\nextras = []\nindex = "https://download.pytorch.org/whl/cu126"\n'
)


def test_variant_from_a_pytorch_cuda_index(tmp_path, monkeypatch):
    """A CUDA 12 variant: torch from PyTorch's cu126 index, its tag, driver floor and container needs."""
    config = load_config(write_config(tmp_path, GPU + CU126))
    variant = config.variants["sm90-cu126"]
    assert variant.torch_pin() == "2.13.0+cu126"
    assert config.variants["sm90"].torch_pin() == "2.13.0"
    assert variant.version_tag("0.1.0") == "0.1.0-cu126-sm90"
    assert (
        variant.driver_cuda_floor == "12.0" and variant.container_env["NVIDIA_REQUIRE_CUDA"] == "cuda>=12.0"
    )
    calls = []
    monkeypatch.setattr(requirements, "_uv", lambda root: ["uv"])
    monkeypatch.setattr(
        requirements.subprocess,
        "run",
        lambda cmd, cwd: calls.append(cmd) or subprocess.CompletedProcess(cmd, 0),
    )
    (tmp_path / "docker/requirements").mkdir(parents=True)
    (tmp_path / "docker/requirements/build-cu126.in").write_text("pip\n")
    requirements.compile_locks(config, [variant], tmp_path)
    for cmd in calls:
        assert cmd[cmd.index("--extra-index-url") + 1] == "https://download.pytorch.org/whl/cu126"
    download = requirements.download_command(Path("l.txt"), Path("o"), "3.11", variant.index)
    assert download[download.index("--extra-index-url") + 1] == variant.index
    assert "--extra-index-url" not in requirements.download_command(Path("l.txt"), Path("o"), "3.11")
    lock_dir = tmp_path / requirements.REQUIREMENTS_DIR
    (lock_dir / "runtime-cu126.txt").write_text("torch==2.13.0 \\\n    --hash=sha256:00\n")
    with pytest.raises(
        TRMError, match=r"pins torch==2.13.0 but variant 'sm90-cu126' needs torch==2.13.0\+cu126"
    ):
        requirements.check_torch_pin(config, variant, tmp_path)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ('index = "http://download.pytorch.org/whl/cu126"', "must be an https:// package index URL"),
        ("index = 3", "must be an https:// package index URL"),
    ],
)
def test_bad_index_is_a_clear_error(tmp_path, extra, message):
    with pytest.raises(TRMError, match=message):
        load_config(write_config(tmp_path, GPU.replace("extras = []\n", f"extras = []\n{extra}\n")))


def test_variants_sharing_a_lock_share_the_index(tmp_path):
    other = CU126.replace("sm90-cu126", "sm80-cu126").replace('"9.0"', '"8.0"').replace('/cu126"', '/cu128"')
    with pytest.raises(TRMError, match="resolve from the same index"):
        load_config(write_config(tmp_path, CU126 + other))


def test_cuda128_lock_is_torch_210_with_cuda12_wheels_and_no_compiler():
    """PyPI's torch 2.10.0 is the CUDA 12.8 build: every nvidia-* pin is a -cu12 wheel, the CUDA toolkit
    components are 12.8.x; the build lock has no nvcc and no adam-atan2 (the family's backend is torch)."""
    config = load_config(CONFIG)
    runtime = requirements.read_pins(requirements.runtime_lock(ROOT, "cu128"))
    assert runtime["torch"] == config.families["cu128"].torch == "2.10.0"
    assert runtime["triton"] == "3.6.0" and "huggingface-hub" in runtime
    nvidia = {name: version for name, version in runtime.items() if name.startswith("nvidia-")}
    assert nvidia and all(name.endswith("-cu12") for name in nvidia), sorted(nvidia)
    toolkit = [n for n in nvidia if n.startswith(("nvidia-cuda-", "nvidia-nvjitlink", "nvidia-nvtx"))]
    assert len(toolkit) >= 4 and all(nvidia[n].startswith("12.8.") for n in toolkit), {
        n: nvidia[n] for n in toolkit
    }
    build = requirements.read_pins(requirements.build_lock(ROOT, "cu128"))
    assert "adam-atan2" not in build and not any(n.startswith("nvidia-cuda-nvcc") for n in build)
    assert {"pip", "setuptools", "wheel"} <= set(build)


def test_cuda128_build_arguments_say_the_torch_backend_everywhere():
    """The build arguments turn into the image's labels and environment (docker/Dockerfile): a CUDA 12.8
    image says torch 2.10.0, optimizer backend torch and no adam-atan2 version; the 13.0 one the extension."""
    config = load_config(CONFIG)
    old = context.build_args(config, config.variants["sm90-cu128"], ROOT)
    new = context.build_args(config, config.variants["sm90"], ROOT)
    assert (old["TORCH_VERSION"], old["OPTIMIZER_BACKEND"], old["ADAM_ATAN2_VERSION"]) == (
        "2.10.0",
        "torch",
        "none",
    )
    assert (old["LOCK"], old["CUDA_VERSION"], old["NVIDIA_REQUIRE_CUDA"]) == ("cu128", "12.8", "cuda>=12.0")
    assert (new["TORCH_VERSION"], new["OPTIMIZER_BACKEND"], new["ADAM_ATAN2_VERSION"]) == (
        "2.13.0",
        "ext",
        "0.0.3",
    )
    dockerfile = (ROOT / context.DOCKERFILE).read_text()
    runtime = dockerfile[dockerfile.index("AS runtime") :]
    assert 'org.trm-stack.optimizer-backend="${OPTIMIZER_BACKEND}"' in runtime
    assert "TRM_IMAGE_OPTIMIZER_BACKEND=${OPTIMIZER_BACKEND}" in runtime
    assert '--optimizer-backend "${OPTIMIZER_BACKEND}"' in runtime
    # the toolchain and the extension are built only for families that ship it
    assert dockerfile.count('[ "${OPTIMIZER_BACKEND}" = ext ]') == 2


def test_docs_list_every_variant_with_its_driver_floor():
    """docs/images.md carries the generated variant table: each variant, its tag and the oldest driver."""
    config = load_config(CONFIG)
    text = (ROOT / "docs/images.md").read_text()
    for variant in config.variants.values():
        floor = f">= {variant.min_driver}" if variant.is_gpu else "none"
        row = next(line for line in text.splitlines() if line.startswith(f"| `{variant.name}` |"))
        assert f"| {floor} |" in row, row
    assert "| >= 570.26 |" in next(line for line in text.splitlines() if line.startswith("| `sm100-cu128` |"))


def test_a_stale_image_table_in_the_docs_is_refused(tmp_path):
    config = load_config(CONFIG)
    for rel in docs.IMAGE_TABLE_PATHS:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(f"x\n{docs.BEGIN}\nold\n{docs.END}\n")
    with pytest.raises(TRMError, match=r"image table in \S*docker/README.md is stale"):
        docs.write_image_tables(config, "0.1.0", tmp_path, check=True)
    assert docs.write_image_tables(config, "0.1.0", tmp_path) == list(docs.IMAGE_TABLE_PATHS)
    assert "`sm120-cu128`" in (tmp_path / "docs/images.md").read_text()


def test_a_family_too_old_for_the_variants_gpus_is_refused(tmp_path):
    """CUDA 12.6 has no Blackwell target: a cu126 variant for 10.0 is a config error naming CUDA 12.8."""
    blackwell = (
        '[variants.sm100-cu126]\ndescription = "B200"\nlock = "cu126"\narchs = ["10.0"]\nextras = []\n'
    )
    with pytest.raises(
        TRMError, match=r"\[variants.sm100-cu126\] builds for \['10.0'\].*CUDA 12.6.*CUDA 12.8"
    ):
        load_config(write_config(tmp_path, GPU + blackwell))


@pytest.mark.parametrize(
    ("name", "archs", "sm_list", "backend", "adam", "require"),
    [("sm100", "10.0", "sm_100", "ext", "0.0.3", "cuda>=13.0"),
     ("sm120", "12.0", "sm_120", "ext", "0.0.3", "cuda>=13.0"),
     ("sm100-cu128", "10.0", "sm_100", "torch", "none", "cuda>=12.8"),
     ("sm120-cu128", "12.0", "sm_120", "torch", "none", "cuda>=12.8")],
)  # fmt: skip
def test_blackwell_build_arguments(name, archs, sm_list, backend, adam, require):
    """What the Dockerfile gets for the Blackwell variants: the extension built for exactly their SM on the
    CUDA 13.0 family (its label and preflight say `ext`), trm's AdamATan2 on the 12.8 one (labelled `torch`,
    adam-atan2 `none`), and the driver floor the container toolkit enforces."""
    config = load_config(CONFIG)
    args = context.build_args(config, config.variants[name], ROOT)
    assert (args["CUDA_ARCHS"], args["SM_LIST"], args["OPTIMIZER_BACKEND"]) == (archs, sm_list, backend)
    assert (args["ADAM_ATAN2_VERSION"], args["NVIDIA_REQUIRE_CUDA"]) == (adam, require)
