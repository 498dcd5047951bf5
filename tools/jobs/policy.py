"""The rules every rendered trainer Job must follow; each one guards a failure our users have had.

`check_objects` takes the objects one overlay renders to and returns human-readable problems.
"""

from __future__ import annotations

import math
import re
import shlex
from pathlib import Path

from tools.images.imagelock import LockedImage
from tools.shell.refs import RefChecker
from trm import gpu_catalog
from trm.exit_codes import BUDGET_STOPPED, CONFIG_ERROR, DISK_FULL, HUNG, NODE_FAULT, NONFINITE, SAVED_RETRY
from trm.gpu_names import names_model

TRAINER = "trainer"
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
REQUIRED_ENV = ("OMP_NUM_THREADS", "PYTORCH_CUDA_ALLOC_CONF")
_SECRET_ENV = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD|CREDENTIAL)", re.I)
_DIGEST_REF = re.compile(r"^[^@\s]+@sha256:[0-9a-f]{64}$")
# Environment for the runtime, the image entrypoint (TRM_PREFLIGHT…) and libraries, not the launcher.
_RUNTIME_ENV = re.compile(
    r"^(OMP_NUM_THREADS|PYTORCH_CUDA_ALLOC_CONF|PYTHONUNBUFFERED|PYTHONFAULTHANDLER|HYDRA_FULL_ERROR|"
    r"WANDB_API_KEY|TRM_PREFLIGHT|TRM_PREFLIGHT_ARGS|(NCCL|TORCH_NCCL|CUDA|NVIDIA)_[A-Z0-9_]+)$"
)
LAUNCH_COMMAND = ["python", "-m", "trm", "launch"]
# `python -m trm launch --experiments a,b,c`: pod i of an Indexed Job runs experiment i (trm.experiments.indexed).
EXPERIMENTS_FLAG = "--experiments"
# The GPUs a Job may be sized for, the values GPU feature discovery puts in nvidia.com/gpu.product for each
# (every spelling seen across clusters and drivers: a pod must accept all of them; whole GPUs only, a MIG
# partition's `<product>-MIG-<profile>` is never listed) and their SM numbers (which image variants run on
# them) are the GPU catalog's: gpu_catalog.k8s_products() and k8s_sm() (trm/gpu_catalog.py).
# Each overlay names the GPU its Job is sized for (commonAnnotations); the affinity must follow it. "any"
# (the one-GPU smoke) accepts every known product its image variant runs on (an sm90 smoke: every H100 and
# H200; an sm100 one: the B200), so the smoke runs on whatever such GPU the cluster has.
GPU_ANNOTATION = "trm-stack/gpu"
ANY_GPU = "any"
# The image variant an overlay deploys (commonAnnotations; tools.jobs.k8s pins its digest).
VARIANT_ANNOTATION = "trm-stack/image-variant"
# What the launcher needs after SIGTERM besides the trainer's save: the handoff bundle and its own exit.
GRACE_MARGIN_S = 60
# activeDeadlineSeconds >= the Job's expected run x this: the dataset build, compiles, restarts after a
# preemption or a hang, and an estimate that is not a measurement.
DEADLINE_MARGIN = 1.25
# The GPU model a Job's annotation names, as the launcher's estimate knows it ("any": the smoke; H100).
DEADLINE_GPU = {"H100": "H100", "H200": "H200", "B200": "B200", ANY_GPU: "H100"}


def launcher_env_names() -> set[str]:
    """The variables `python -m trm launch` documents (its --help-env list)."""
    from trm.launch.config.variables import ALL_VARS

    return {var.name for var in ALL_VARS}


def is_launcher(container: dict) -> bool:
    """The container runs `python -m trm launch` (as args behind the entrypoint, or as its command)."""
    words = [*container.get("command", []), *container.get("args", [])]
    return words[: len(LAUNCH_COMMAND)] == LAUNCH_COMMAND


_REFERENCE = re.compile(r"(?<!\$)\$\(([A-Za-z_][A-Za-z0-9_]*)\)")
# Pod labels that are the same for every pod of one Job and new for each Job created (the first is set
# by every Kubernetes version; the second from 1.27).
JOB_UID_LABELS = ("controller-uid", "batch.kubernetes.io/controller-uid")


def _downward_field(var: dict) -> str | None:
    return var.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath")


def check_launcher_env(where: str, container: dict) -> list[str]:
    """A launcher container may only set variables the launcher documents, or runtime/library ones, or a
    downward-API value that another variable uses as `$(NAME)`."""
    if not is_launcher(container):
        return []
    known = launcher_env_names()
    env = container.get("env", [])
    referenced = {ref for var in env for ref in _REFERENCE.findall(var.get("value") or "")}
    return [
        f"{where}: env {var['name']} is neither a launcher setting (`python -m trm launch --help-env`) "
        "nor a runtime variable; a typo here is silently ignored"
        for var in env
        if var["name"] not in known
        and not _RUNTIME_ENV.match(var["name"])
        and not (_downward_field(var) and var["name"] in referenced)
    ]


def check_env_references(where: str, container: dict) -> list[str]:
    """`$(NAME)` in an env value must name a variable defined above it: Kubernetes leaves it verbatim
    otherwise (a run named `smoke-$(SMOKE_JOB_UID)`)."""
    problems, seen = [], set()
    for var in container.get("env", []):
        for ref in _REFERENCE.findall(var.get("value") or ""):
            if ref not in seen:
                problems.append(
                    f"{where}: env {var['name']} uses $({ref}), which is not defined above it in the "
                    "container's env: Kubernetes passes the text unexpanded"
                )
        seen.add(var["name"])
    return problems


def check_smoke_is_fresh(name: str, trainer: dict) -> list[str]:
    """A smoke Job's RUN_NAME is unique per Job, so no smoke resumes an earlier smoke's run."""
    env = trainer.get("env", [])
    values = {var["name"]: var.get("value") for var in env}
    if not str(values.get("TASK") or "").endswith("-smoke"):
        return []
    uid_vars = {
        var["name"]
        for var in env
        if _downward_field(var) in {f"metadata.labels['{label}']" for label in JOB_UID_LABELS}
    }
    if not uid_vars & set(_REFERENCE.findall(values.get("RUN_NAME") or "")):
        return [
            f"{name}: a smoke Job's RUN_NAME must contain the Job's UID (an env from fieldRef "
            f"metadata.labels['{JOB_UID_LABELS[0]}'], used as $(NAME)): with a fixed name a second smoke "
            "on the same volume resumes the finished first one, skips the smoke gate and passes untested"
        ]
    return []


def _rules(job: dict) -> list[dict]:
    return job["spec"].get("podFailurePolicy", {}).get("rules", [])


def _exit_rule(job: dict, code: int) -> str | None:
    for rule in _rules(job):
        codes = rule.get("onExitCodes", {})
        if codes.get("operator") == "In" and code in codes.get("values", []):
            return rule["action"]
    return None


def _disruption_rule(job: dict) -> str | None:
    for rule in _rules(job):
        if any(c.get("type") == "DisruptionTarget" for c in rule.get("onPodConditions", [])):
            return rule["action"]
    return None


def check_failure_policy(name: str, job: dict) -> list[str]:
    """Deadlines, cleanup and the exit-code contract of `trm.exit_codes`."""
    spec = job["spec"]
    problems = []
    for key in ("activeDeadlineSeconds", "ttlSecondsAfterFinished"):
        if not isinstance(spec.get(key), int) or spec[key] <= 0:
            problems.append(f"{name}: spec.{key} must be set (a run without it can bill forever / linger)")
    if spec["template"]["spec"].get("restartPolicy") != "Never":
        problems.append(f"{name}: podFailurePolicy needs restartPolicy: Never")
    if _exit_rule(job, CONFIG_ERROR) != "FailJob":
        problems.append(f"{name}: exit {CONFIG_ERROR} (configuration error) must FailJob, not be retried")
    if _exit_rule(job, BUDGET_STOPPED) != "FailJob":
        problems.append(
            f"{name}: exit {BUDGET_STOPPED} (MAX_HOURS budget spent) must FailJob, or the budget never "
            "stops the run"
        )
    if _exit_rule(job, DISK_FULL) != "FailJob":
        problems.append(f"{name}: exit {DISK_FULL} (checkpoint volume full) must FailJob, not be retried")
    if _exit_rule(job, NONFINITE) != "FailJob":
        problems.append(
            f"{name}: exit {NONFINITE} (non-finite loss or gradients) must FailJob: a retry replays the same "
            "data and diverges again"
        )
    if _exit_rule(job, HUNG) not in ("Ignore", "Count"):
        problems.append(f"{name}: exit {HUNG} (hung, the watchdog ended it) must be retried (Count/Ignore)")
    if _exit_rule(job, SAVED_RETRY) not in ("Ignore", "Count"):
        problems.append(f"{name}: exit {SAVED_RETRY} (saved, safe to retry) must be retried (Ignore/Count)")
    if _exit_rule(job, NODE_FAULT) != "Count":
        problems.append(
            f"{name}: exit {NODE_FAULT} (a fault of the node found by the preflight) must be a Count rule: "
            "retried on a new pod, bounded by backoffLimit (FailJob ends the run on one bad GPU; Ignore "
            "retries a cluster-wide fault until the deadline)"
        )
    if _disruption_rule(job) != "Ignore":
        problems.append(f"{name}: a DisruptionTarget pod condition (preemption, drain) must be Ignore'd")
    for rule in _rules(job):
        container = rule.get("onExitCodes", {}).get("containerName")
        if container is not None and container != TRAINER:
            problems.append(f"{name}: podFailurePolicy names container {container!r}, not {TRAINER!r}")
    return problems


def _launch_setting(env: dict[str, str | None], name: str) -> str:
    from trm.launch.config.variables import ALL_VARS

    value = env.get(name)
    return value if value else next(str(v.default) for v in ALL_VARS if v.name == name)


def check_deadline(name: str, job: dict) -> list[str]:
    """The Job's deadline outlasts the run it starts: at least DEADLINE_MARGIN x the launcher's expected time
    for its TASK on its GPUs (trm.launch.plan.paper_runs, the dry run's estimate). Jobs whose run has no
    estimate (an experiment Job, a dataset without recorded sizes such as the smoke's) are not checked."""
    from trm.launch.cost.estimate import RunEstimate
    from trm.launch.plan.paper_runs import expected_run

    deadline = job["spec"].get("activeDeadlineSeconds")
    gpu = DEADLINE_GPU.get(job["metadata"].get("annotations", {}).get(GPU_ANNOTATION, ""))
    trainers = [c for c in job["spec"]["template"]["spec"].get("containers", []) if c["name"] == TRAINER]
    if (
        not isinstance(deadline, int)
        or gpu is None
        or len(trainers) != 1
        or experiment_names(job) is not None
    ):
        return []
    env = {e["name"]: e.get("value") for e in trainers[0].get("env", [])}
    task = _launch_setting(env, "TASK")
    limit = trainers[0].get("resources", {}).get("limits", {}).get("nvidia.com/gpu")
    try:  # NUM_GPUS unset: every GPU the pod gets
        gpus, nnodes = int(env.get("NUM_GPUS") or limit or ""), int(_launch_setting(env, "NNODES"))
    except ValueError:
        return []
    estimate = expected_run(task, gpu, gpus, nnodes)
    if not isinstance(estimate, RunEstimate):
        return []
    need = math.ceil(estimate.wall_seconds * DEADLINE_MARGIN)
    if deadline >= need:
        return []
    shape = f"{gpus}x {gpu}" + (f" x {nnodes} nodes" if nnodes > 1 else "")
    return [
        f"{name}: activeDeadlineSeconds {deadline} ({deadline / 3600:.0f} h) is shorter than TASK={task}'s "
        f"expected run on {shape}, {estimate.wall_seconds / 3600:.0f} h (step time: {estimate.step_source}), x "
        f"{DEADLINE_MARGIN:g} margin: Kubernetes would kill the run before it ends; set it to at least {need} "
        f"({need / 3600:.0f} h) in the overlay's job-patch.yaml (`python -m trm launch --dry-run` states the time)"
    ]


def check_pod(name: str, pod: dict, image: LockedImage | None, refs: RefChecker | None) -> list[str]:
    """Volumes, image pin, GPU placement, env and the container's command."""
    problems = []
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    problems += check_gpu_placement(name, pod)
    trainers = [c for c in pod.get("containers", []) if c["name"] == TRAINER]
    if len(trainers) != 1:
        return [*problems, f"{name}: needs exactly one container named {TRAINER!r}"]
    problems += check_trainer_start(name, pod, trainers[0])
    for container in pod.get("initContainers", []) + pod["containers"]:
        where = f"{name} container {container['name']}"
        ref = container.get("image", "")
        if not _DIGEST_REF.match(ref):
            problems.append(
                f"{where}: image {ref!r} is not pinned by digest (run `python -m tools.jobs pin`)"
            )
        elif image is not None and ref != image.pinned:
            problems.append(f"{where}: image {ref} differs from the lock file's {image.pinned}")
        elif container["name"] == TRAINER:
            env = {e["name"]: e.get("value") for e in container.get("env", [])}
            if env.get("TRM_IMAGE_DIGEST") != ref.split("@", 1)[1]:
                problems.append(
                    f"{where}: TRM_IMAGE_DIGEST must be the image's digest (run `python -m tools.jobs pin`)"
                )
        problems += _check_mounts(where, container, volumes)
        problems += _check_env(where, container)
        problems += check_launcher_env(where, container)
        problems += check_env_references(where, container)
        if refs is not None:
            words = [*container.get("command", []), *container.get("args", [])]
            problems += [f"{where}: {p}" for p in refs.check_code(shlex.join(words))] if words else []
    trainer = trainers[0]
    problems += check_smoke_is_fresh(name, trainer)
    limits = trainer.get("resources", {}).get("limits", {})
    if "nvidia.com/gpu" not in limits:
        problems.append(f"{name}: the trainer must request GPUs (resources.limits nvidia.com/gpu)")
    env = {e["name"] for e in trainer.get("env", [])}
    problems += [f"{name}: the trainer must set {var}" for var in REQUIRED_ENV if var not in env]
    if not any(var.startswith(("NCCL_", "TORCH_NCCL_")) for var in env):
        problems.append(f"{name}: the trainer must set NCCL behaviour (e.g. TORCH_NCCL_ASYNC_ERROR_HANDLING)")
    return problems


def _product_terms(pod: dict) -> list[list[str]]:
    """The nvidia.com/gpu.product values each required node-affinity term accepts."""
    affinity = pod.get("affinity", {}).get("nodeAffinity", {})
    terms = affinity.get("requiredDuringSchedulingIgnoredDuringExecution", {}).get("nodeSelectorTerms", [])
    return [
        list(expr.get("values", []))
        for term in terms
        for expr in term.get("matchExpressions", [])
        if expr.get("key") == GPU_PRODUCT_LABEL and expr.get("operator") == "In"
    ]


def check_gpu_placement(name: str, pod: dict) -> list[str]:
    """The GPU product is chosen by required node affinity listing every known label value of that GPU."""
    if GPU_PRODUCT_LABEL in pod.get("nodeSelector", {}):
        value = pod["nodeSelector"][GPU_PRODUCT_LABEL]
        return [
            f"{name}: nodeSelector {GPU_PRODUCT_LABEL}={value} matches one spelling of the GPU only; use "
            "required node affinity (operator In) over every known value (k8s_products in trm/gpu_catalog.py)"
        ]
    terms = _product_terms(pod)
    if not terms:
        return [
            f"{name}: required node affinity must pick the GPU product ({GPU_PRODUCT_LABEL}, operator In)"
        ]
    problems = []
    for values in terms:
        for gpu, known in gpu_catalog.k8s_products().items():
            # whole words: the A10's rule is not the A100's, the L4's not the L40S's, the B200's not the GB200's
            if any(names_model(gpu.replace("-", " "), v.replace("-", " ")) for v in values):
                missing = [v for v in known if v not in values]
                if missing:
                    problems.append(
                        f"{name}: the {GPU_PRODUCT_LABEL} affinity for {gpu} lacks {', '.join(missing)}; "
                        "clusters label the same GPU differently, list every known value"
                    )
    return problems


def gpus_run_by(variant: str | None) -> list[str]:
    """The GPUs a Job may be sized for (gpu_catalog.k8s_products()) whose compute capability the image
    variant's build runs on (all of them for an unknown variant)."""
    from trm.images import catalog, compat

    archs = next((entry[4] for entry in catalog.VARIANTS if entry[0] == variant), None)
    if archs is None:
        return list(gpu_catalog.k8s_products())
    built = compat.parse_sm_list(" ".join(archs))
    return [gpu for gpu, sm in gpu_catalog.k8s_sm().items() if compat.sm_covered(sm, built)]


def accepted_products(gpu: str, variant: str | None = None) -> list[str]:
    """The nvidia.com/gpu.product values a Job sized for `gpu` (a gpu_catalog.k8s_products() key, or "any":
    every product the Job's image `variant` runs on) accepts."""
    known = gpu_catalog.k8s_products()
    if gpu == ANY_GPU:
        return [v for name in gpus_run_by(variant) for v in known[name]]
    return list(known[gpu])


def check_gpu_follows_overlay(name: str, job: dict) -> list[str]:
    """The Job's GPU annotation is known, its image variant runs on that GPU, and its required affinity
    accepts exactly that GPU's products (for "any": every product the variant runs on)."""
    annotations = job["metadata"].get("annotations", {})
    gpu, variant = annotations.get(GPU_ANNOTATION), annotations.get(VARIANT_ANNOTATION)
    choices = [*gpu_catalog.k8s_products(), ANY_GPU]
    if gpu not in choices:
        return [
            f"{name}: annotation {GPU_ANNOTATION} must name the GPU the overlay is sized for ({', '.join(choices)}; "
            "commonAnnotations in its kustomization.yaml), so that its node affinity can follow it"
        ]
    if gpu != ANY_GPU and gpu not in gpus_run_by(variant):
        sm = gpu_catalog.k8s_sm()[gpu]
        return [
            f"{name}: {GPU_ANNOTATION}={gpu} (sm_{sm}) but {VARIANT_ANNOTATION}={variant} does not run "
            f"on it ('no kernel image is available'); use a variant for sm_{sm} (docs/images.md)"
        ]
    terms = _product_terms(job["spec"]["template"]["spec"])
    want = accepted_products(gpu, variant)
    if any(sorted(values) != sorted(want) for values in terms):
        return [
            f"{name}: {GPU_ANNOTATION}={gpu} but the {GPU_PRODUCT_LABEL} affinity accepts {terms}: set it to "
            f"[{', '.join(want)}] in the overlay's job-patch.yaml (a pod for a GPU the cluster lacks stays Pending)"
        ]
    return []


def check_driver_affinity(name: str, pod: dict, variant: str | None) -> list[str]:
    """Every required node-affinity term asks for a node whose driver runs the variant's image (GPU feature
    discovery's nvidia.com/cuda.driver.major above its floor - 1: the family's min_driver, or the newer
    driver its GPUs need, R570 for the CUDA 12.8 Blackwell variants)."""
    from trm.images.families import DRIVER_LABEL, driver_affinity, variant_driver_floor

    floor = variant_driver_floor(variant) if variant else None
    if floor is None:
        return []
    family, branch = floor
    want = driver_affinity(branch)
    affinity = pod.get("affinity", {}).get("nodeAffinity", {})
    terms = affinity.get("requiredDuringSchedulingIgnoredDuringExecution", {}).get("nodeSelectorTerms", [])
    fix = (
        f'add to each term {{key: {DRIVER_LABEL}, operator: Gt, values: ["{want["values"][0]}"]}} (variant '
        f"{variant} is CUDA {family.cuda}, drivers R{branch}+; docker/images.toml [families])"
    )
    if not terms:
        return [f"{name}: no required node affinity on the driver: {fix}"]
    problems = []
    for i, term in enumerate(terms):
        found = [e for e in term.get("matchExpressions", []) if e.get("key") == DRIVER_LABEL]
        if [{k: e.get(k) for k in want} for e in found] != [want]:
            problems.append(
                f"{name}: node-affinity term {i} has {found or 'no ' + DRIVER_LABEL + ' rule'}: {fix}"
            )
    return problems


def _shutdown_timeout(container: dict) -> int | None:
    """The container's SHUTDOWN_TIMEOUT (the launcher's default when unset); None when not a number."""
    from trm.launch.config.variables import ALL_VARS

    env = {e["name"]: e.get("value") for e in container.get("env", [])}
    default = next(v.default for v in ALL_VARS if v.name == "SHUTDOWN_TIMEOUT")
    try:
        return int(env.get("SHUTDOWN_TIMEOUT") or default)
    except ValueError:
        return None


def check_trainer_start(name: str, pod: dict, trainer: dict) -> list[str]:
    """The launcher starts behind the image entrypoint, and SIGTERM leaves it time to save."""
    problems = []
    if "command" in trainer:
        problems.append(
            f"{name}: the trainer sets `command`, which replaces the image's entrypoint (banner, preflight, "
            "exec as PID 1); put the launcher in `args` instead"
        )
    elif not is_launcher(trainer):
        problems.append(f"{name}: the trainer's args must start with {' '.join(LAUNCH_COMMAND)}")
    grace = pod.get("terminationGracePeriodSeconds", 30)
    shutdown = _shutdown_timeout(trainer)
    if shutdown is None:
        return [*problems, f"{name}: the trainer's SHUTDOWN_TIMEOUT must be a whole number of seconds"]
    need = shutdown + GRACE_MARGIN_S
    if grace < need:
        problems.append(
            f"{name}: terminationGracePeriodSeconds {grace} < SHUTDOWN_TIMEOUT {need - GRACE_MARGIN_S} + "
            f"{GRACE_MARGIN_S} s: a slow save would be SIGKILLed; set it to at least {need}"
        )
    return problems


def _check_mounts(where: str, container: dict, volumes: dict[str, dict]) -> list[str]:
    problems = []
    mounts = container.get("volumeMounts", [])
    shm = [m for m in mounts if m["mountPath"] == "/dev/shm"]
    if container["name"] == TRAINER and not shm:
        problems.append(
            f"{where}: /dev/shm must be a memory-backed emptyDir (the 64 MiB default → bus errors)"
        )
    for mount in shm:
        if volumes.get(mount["name"], {}).get("emptyDir", {}).get("medium") != "Memory":
            problems.append(f"{where}: /dev/shm must come from an emptyDir with medium: Memory")
    workdir = container.get("workingDir")
    for mount in mounts:
        volume = volumes.get(mount["name"], {})
        if "persistentVolumeClaim" not in volume:
            continue
        if not mount.get("subPath"):
            problems.append(
                f"{where}: PVC mounted at {mount['mountPath']} without subPath (mount data/checkpoints)"
            )
        path = mount["mountPath"].rstrip("/") or "/"
        if path in ("/", "/workspace", "/opt", "/app", "/home") or (
            workdir and (workdir.rstrip("/") + "/").startswith(path + "/")
        ):
            problems.append(f"{where}: PVC mounted at {path} would hide the image's code; mount subfolders")
    return problems


def _check_env(where: str, container: dict) -> list[str]:
    problems = []
    for var in container.get("env", []):
        if _SECRET_ENV.search(var["name"]) and "value" in var:
            problems.append(
                f"{where}: {var['name']} has an inline value; take it from a Secret (secretKeyRef)"
            )
    return problems


def check_multinode(name: str, job: dict, objects: list[dict], rwx_claims: set[str]) -> list[str]:
    """An Indexed multi-pod Job needs a matching headless Service, a rendezvous address and RWX storage."""
    spec = job["spec"]
    if (spec.get("parallelism") or 1) <= 1 or experiment_names(job) is not None:
        return []
    pod = spec["template"]["spec"]
    problems = []
    if spec.get("completionMode") != "Indexed" or spec.get("completions") != spec.get("parallelism"):
        problems.append(
            f"{name}: multi-pod training needs completionMode: Indexed with completions = parallelism"
        )
    services = {o["metadata"]["name"]: o for o in objects if o["kind"] == "Service"}
    service = services.get(pod.get("subdomain", ""))
    if service is None:
        problems.append(
            f"{name}: spec.template.spec.subdomain must name a headless Service in the same overlay"
        )
    else:
        if service["spec"].get("clusterIP") != "None":
            problems.append(
                f"{name}: Service {service['metadata']['name']} must be headless (clusterIP: None)"
            )
        labels = spec["template"].get("metadata", {}).get("labels", {})
        selector = service["spec"].get("selector", {})
        if not selector or any(labels.get(k) != v for k, v in selector.items()):
            problems.append(f"{name}: Service selector {selector} does not match the pod labels {labels}")
        env = {e["name"]: e.get("value") for c in pod["containers"] for e in c.get("env", [])}
        expected = f"{job['metadata']['name']}-0.{service['metadata']['name']}"
        if env.get("MASTER_ADDR") != expected:
            problems.append(f"{name}: MASTER_ADDR must be {expected} (pod 0 of the Indexed Job)")
    for volume in pod.get("volumes", []):
        claim = volume.get("persistentVolumeClaim", {}).get("claimName")
        if claim is not None and claim not in rwx_claims:
            problems.append(f"{name}: multi-node pods need a ReadWriteMany claim, not {claim!r}")
    return problems


def experiment_names(job: dict) -> list[str] | None:
    """The experiments an Indexed experiment Job runs (None for any other Job)."""
    for container in job["spec"]["template"]["spec"].get("containers", []):
        args = container.get("args", [])
        if EXPERIMENTS_FLAG in args and args.index(EXPERIMENTS_FLAG) + 1 < len(args):
            return args[args.index(EXPERIMENTS_FLAG) + 1].split(",")
    return None


def check_experiments_job(name: str, job: dict) -> list[str]:
    """An experiment Job: Indexed, one completion per listed experiment, every name a shipped experiment."""
    names = experiment_names(job)
    if names is None:
        return []
    spec = job["spec"]
    problems = []
    if spec.get("completionMode") != "Indexed" or spec.get("completions") != len(names):
        problems.append(
            f"{name}: an experiment Job needs completionMode: Indexed and completions = {len(names)} "
            "(one per listed experiment; JOB_COMPLETION_INDEX selects it)"
        )
    if not 1 <= (spec.get("parallelism") or 1) <= len(names):
        problems.append(f"{name}: parallelism must be between 1 and the {len(names)} experiments")
    from trm.experiments.suite import Catalog

    known = Catalog.load().experiments
    problems += [
        f"{name}: {n!r} is not a shipped experiment (python -m trm experiment list)"
        for n in names
        if n not in known
    ]
    return problems


def check_objects(
    objects: list[dict], image: LockedImage | None, refs: RefChecker | None, rwx_claims: set[str]
) -> list[str]:
    """Every rule above for the objects of one rendered overlay."""
    problems = []
    for obj in objects:
        name = f"{obj['kind']}/{obj['metadata']['name']}"
        if obj["kind"] == "Job":
            problems += check_failure_policy(name, obj)
            problems += check_deadline(name, obj)
            problems += check_pod(name, obj["spec"]["template"]["spec"], image, refs)
            problems += check_gpu_follows_overlay(name, obj)
            problems += check_multinode(name, obj, objects, rwx_claims)
            problems += check_experiments_job(name, obj)
        elif obj["kind"] == "Secret":
            problems.append(f"{name}: Secrets are created by hand on the cluster, never committed")
    return problems


def rwx_claim_names(objects_by_dir: dict[Path, list[dict]]) -> set[str]:
    """Names of the ReadWriteMany PVCs among rendered objects."""
    return {
        o["metadata"]["name"]
        for objs in objects_by_dir.values()
        for o in objs
        if o["kind"] == "PersistentVolumeClaim" and "ReadWriteMany" in o["spec"].get("accessModes", [])
    }
