"""deploy/: the manifests against the Kubernetes and KEDA schemas, and the invariants the
design relies on (two beats, one consumer per queue, autoscalers watching the right
queue, probes, non-root), with the Procfile as the single list of processes."""

from __future__ import annotations

import copy
import re
import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import jsonschema
import kubernetes_validate
import pytest
import yaml

from shared.infra.config import ENVIRONMENT, ConfigError, load_settings
from shared.infra.queue import LLM_BULK_QUEUE, LLM_QUEUE, QUEUES, TASK_ROUTES
from shared.llm.factory import longest_llm_call_s
from worker.app import LLM_TASK_TIME_LIMIT_S
from worker.context import GREENLETS_PER_CONNECTION

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy" / "k8s"
KEDA_SCHEMAS = ROOT / "tests" / "data" / "keda"
# The oldest minor the large managed offerings still run, and the newest the validator
# ships: a field that is missing in either fails.
KUBERNETES_VERSIONS = ("1.33", "1.37")
# Applied by hand, never by `kubectl apply -k` (it holds placeholders).
EXAMPLE_SECRET = "secret.example.yaml"
# Read by the processes or by KEDA, though not settings of shared/infra/config.py.
OTHER_VARIABLES = {"PROMETHEUS_MULTIPROC_DIR", "LOG_LEVEL", "REDIS_PASSWORD"}
# OpenTelemetry's own, read by its SDK (shared/infra/tracing.py): compose passes them
# through from the shell, empty meaning off (tests/unit/test_deploy_tracing_44.py).
TRACING_VARIABLES = {
    "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_TRACES_SAMPLER",
    "OTEL_TRACES_SAMPLER_ARG", "OTEL_RESOURCE_ATTRIBUTES",
}  # fmt: skip
# The Procfile's name of each process, from the workload's component label. The
# Procfile's one `worker` (docs/contract.md: all queues) runs as one Deployment per queue, so
# each queue scales on its own length.
PROCESS_OF_COMPONENT = {
    "migrate": "release", "worker-llm": "worker", "worker-fast": "worker",
    "worker-webhooks": "worker", "worker-embeddings": "worker",
}  # fmt: skip
# The queues of each worker Deployment: the LLM one takes both lanes, so that it fetches
# live and bulk jobs in turn; each other queue has its own, which scales alone.
WORKER_QUEUES = {
    "driftless-worker-llm": {LLM_QUEUE, LLM_BULK_QUEUE},
    "driftless-worker-fast": {"fast"},
    "driftless-worker-webhooks": {"webhooks"},
    "driftless-worker-embeddings": {"embeddings", "embeddings_bulk"},
}
# Queues whose jobs wait on the network (an LLM provider, customers' webhook receivers):
# a gevent pool, many tasks per process. The others run prefork.
GREEN_QUEUES = {"llm", "llm_bulk", "webhooks", "embeddings", "embeddings_bulk"}
# What a per-queue worker may set differently from the Procfile's worker.
PER_QUEUE_OPTIONS = ("--hostname", "--queues", "--pool", "--concurrency")
# The redis (lists) scaler's metadata, https://keda.sh/docs/latest/scalers/redis-lists/
REDIS_SCALER_METADATA = {
    "address", "host", "port", "listName", "listLength", "activationListLength",
    "databaseIndex", "enableTLS", "unsafeSsl", "addressFromEnv", "hostFromEnv",
    "portFromEnv", "usernameFromEnv", "passwordFromEnv",
}  # fmt: skip


# --- reading the files ---------------------------------------------------------------


def _manifests() -> list[tuple[str, dict[str, Any]]]:
    documents = []
    for path in sorted(K8S.glob("*.yaml")):
        if path.name == "kustomization.yaml":
            continue
        for document in yaml.safe_load_all(path.read_text()):
            if document:
                documents.append((path.name, document))
    return documents


MANIFESTS = _manifests()


def _of_kind(kind: str) -> list[dict[str, Any]]:
    return [document for _, document in MANIFESTS if document["kind"] == kind]


def _named(kind: str, name: str) -> dict[str, Any]:
    (found,) = [d for d in _of_kind(kind) if d["metadata"]["name"] == name]
    return found


def _workloads() -> list[dict[str, Any]]:
    return _of_kind("Deployment") + _of_kind("Job")


def _component(workload: dict[str, Any]) -> str:
    return str(workload["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/component"])


def _containers(workload: dict[str, Any]) -> list[dict[str, Any]]:
    return list(workload["spec"]["template"]["spec"]["containers"])


def _env(container: dict[str, Any]) -> dict[str, str]:
    return {item["name"]: item["value"] for item in container.get("env", [])}


def _expand(word: str, env: dict[str, str]) -> str:
    """`${NAME}`, `${NAME:-default}` (shell) and `$(NAME)` (Kubernetes) from `env`."""
    word = re.sub(r"\$\((\w+)\)", lambda m: env[m.group(1)], word)
    return re.sub(r"\$\{(\w+)(?::-([^}]*))?\}", lambda m: env.get(m.group(1), m.group(2)), word)


def _procfile() -> dict[str, list[str]]:
    processes = {}
    for line in (ROOT / "Procfile").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, command = line.split(":", 1)
            processes[name.strip()] = shlex.split(command)
    return processes


PROCFILE = _procfile()


def _common_part(command: list[str]) -> list[str]:
    """A command without the options a per-queue worker chooses for itself."""
    kept, skip = [], False
    for word in command:
        if skip:
            skip = False
        elif word in PER_QUEUE_OPTIONS:
            skip = True
        else:
            kept.append(word)
    return kept


def _runs_as(command: list[str], process: str, env: dict[str, str]) -> bool:
    """`command` is the Procfile's `process`, or (a worker) the same bar its per-queue options."""
    expected = [_expand(word, env) for word in PROCFILE[process]]
    if process == "worker":
        return _common_part(command) == _common_part(expected)
    return command == expected


def _queues(command: list[str]) -> set[str]:
    return set(command[command.index("--queues") + 1].split(","))


def _option(command: list[str], option: str) -> str:
    return command[command.index(option) + 1]


def _is_worker(command: list[str]) -> bool:
    return command[:4] == ["celery", "-A", "worker.main", "worker"]


def _is_beat(command: list[str]) -> bool:
    return command[:4] == ["celery", "-A", "worker.main", "beat"]


def _example_secret() -> dict[str, str]:
    (secret,) = [d for name, d in MANIFESTS if name == EXAMPLE_SECRET]
    return dict(secret["stringData"])


def _strict(schema: Any) -> Any:
    """The schema with unknown fields rejected, as the API server's strict field validation does."""
    if isinstance(schema, dict):
        schema = {key: _strict(value) for key, value in schema.items()}
        if "properties" in schema and "additionalProperties" not in schema:
            schema["additionalProperties"] = False
    elif isinstance(schema, list):
        schema = [_strict(item) for item in schema]
    return schema


KEDA_SCHEMA_FILES = {
    "ScaledObject": "scaledobject.schema.yaml",
    "TriggerAuthentication": "triggerauthentication.schema.yaml",
}


def _keda_errors(document: dict[str, Any]) -> Iterator[str]:
    schema = _strict(
        yaml.safe_load((KEDA_SCHEMAS / KEDA_SCHEMA_FILES[document["kind"]]).read_text())
    )
    for error in jsonschema.Draft7Validator(schema).iter_errors(document):
        yield f"{'.'.join(map(str, error.path))}: {error.message}"
    # KEDA's schema leaves metadata open; hold it to Kubernetes' ObjectMeta.
    as_configmap = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": document["metadata"]}
    try:
        kubernetes_validate.validate(as_configmap, KUBERNETES_VERSIONS[0], strict=True)
    except kubernetes_validate.ValidationError as exc:
        yield f"metadata: {exc.message}"


def _kubernetes_errors(document: dict[str, Any], version: str) -> Iterator[str]:
    try:
        kubernetes_validate.validate(document, version, strict=True)
    except kubernetes_validate.ValidationError as exc:
        yield f"{'.'.join(map(str, exc.path))}: {exc.message}"


# --- schemas ---------------------------------------------------------------------------


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_every_kubernetes_object_validates_strictly(version: str) -> None:
    problems = [
        f"{file} {doc['kind']}/{doc['metadata']['name']}: {error}"
        for file, doc in MANIFESTS
        if not doc["apiVersion"].startswith("keda.sh/")
        for error in _kubernetes_errors(doc, version)
    ]
    assert problems == []


def test_every_keda_object_validates_against_the_vendored_crd_schema() -> None:
    keda = [(file, doc) for file, doc in MANIFESTS if doc["apiVersion"].startswith("keda.sh/")]
    assert {doc["kind"] for _, doc in keda} == set(KEDA_SCHEMA_FILES)
    problems = [
        f"{file} {doc['kind']}/{doc['metadata']['name']}: {error}"
        for file, doc in keda
        for error in _keda_errors(doc)
    ]
    assert problems == []


def test_the_validators_reject_a_misspelled_field() -> None:
    deployment = copy.deepcopy(_named("Deployment", "driftless-web"))
    deployment["spec"]["template"]["spec"]["containers"][0]["livenesProbe"] = {}
    assert any("livenesProbe" in e for e in _kubernetes_errors(deployment, KUBERNETES_VERSIONS[0]))
    scaled = copy.deepcopy(_of_kind("ScaledObject")[0])
    scaled["spec"]["minReplicas"] = 1  # KEDA spells it minReplicaCount
    assert any("minReplicas" in error for error in _keda_errors(scaled))
    scaled = copy.deepcopy(_of_kind("ScaledObject")[0])
    scaled["metadata"]["labeles"] = {}
    assert any("labeles" in error for error in _keda_errors(scaled))


def test_redis_triggers_use_only_the_scalers_parameters() -> None:
    for scaled in _of_kind("ScaledObject"):
        for trigger in scaled["spec"]["triggers"]:
            assert trigger["type"] == "redis"
            assert set(trigger["metadata"]) <= REDIS_SCALER_METADATA
            assert int(trigger["metadata"]["listLength"]) > 0


def test_kustomization_applies_every_manifest_but_the_example_secret() -> None:
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    on_disk = {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml", EXAMPLE_SECRET}
    assert sorted(kustomization["resources"]) == sorted(on_disk)
    images = {image["name"] for image in kustomization["images"]}
    used = {c["image"] for w in _workloads() for c in _containers(w)}
    assert used == images == {"driftless"}


# --- processes: the Procfile, Kubernetes, compose and the Dockerfile agree --------------


def test_every_procfile_process_runs_in_kubernetes_with_the_same_command() -> None:
    processes = []
    for workload in _workloads():
        (container,) = _containers(workload)
        process = PROCESS_OF_COMPONENT.get(_component(workload), _component(workload))
        processes.append(process)
        env = _env(container)
        in_kubernetes = [_expand(word, env) for word in container["command"]]
        assert _runs_as(in_kubernetes, process, env), process
    assert set(processes) == set(PROCFILE)
    # One worker Deployment per queue (the LLM one per lane pair).
    assert sorted(processes) == sorted([*PROCFILE, *["worker"] * (len(WORKER_QUEUES) - 1)])


def test_the_procfile_worker_consumes_every_queue() -> None:
    # docs/contract.md: the one `worker` process runs every job; a queue it does not name
    # would fill up with nobody to take it (driftless up and the fault suite run it too).
    assert _queues(PROCFILE["worker"]) == set(QUEUES)
    # QUEUES: every queue a task is routed to, and the LLM tasks' bulk lane.
    assert set(QUEUES) == {route["queue"] for route in TASK_ROUTES.values()} | {LLM_BULK_QUEUE}


def test_the_migration_job_runs_db_upgrade() -> None:
    (job,) = _of_kind("Job")
    (container,) = _containers(job)
    assert container["command"] == ["driftless", "db", "upgrade"] == PROCFILE["release"]
    assert job["spec"]["backoffLimit"] > 0
    assert job["spec"]["ttlSecondsAfterFinished"] > 0
    assert job["spec"]["template"]["spec"]["restartPolicy"] in {"Never", "OnFailure"}


def test_two_beats_one_active_that_nothing_scales_42() -> None:
    beats = [d for d in _of_kind("Deployment") if _is_beat(_containers(d)[0]["command"])]
    assert len(beats) == 1
    (beat,) = beats
    # Two replicas (worker/beat.py's lock keeps one active); a rollout replaces one at a
    # time, so the other goes on sending.
    assert beat["spec"]["replicas"] == 2
    assert beat["spec"]["strategy"]["type"] == "RollingUpdate"
    assert beat["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 1
    assert beat["metadata"]["name"] not in _autoscaled()


def _autoscaled() -> list[str]:
    """Names of the Deployments an HPA or a ScaledObject scales (one entry each)."""
    return [
        d["spec"]["scaleTargetRef"]["name"]
        for d in _of_kind("HorizontalPodAutoscaler") + _of_kind("ScaledObject")
    ]


def test_each_queue_has_exactly_one_worker_deployment_and_every_route_a_consumer() -> None:
    consumers: dict[str, list[str]] = {}
    for deployment in _of_kind("Deployment"):
        command = _containers(deployment)[0]["command"]
        if _is_worker(command):
            name = deployment["metadata"]["name"]
            assert _queues(command) == WORKER_QUEUES[name], name
            for queue in _queues(command):
                consumers.setdefault(queue, []).append(name)
    assert all(len(names) == 1 for names in consumers.values()), consumers
    assert set(consumers) == set(QUEUES)


def test_pools_fit_the_work_and_the_connection_pool_fits_the_pool() -> None:
    for deployment in _of_kind("Deployment"):
        (container,) = _containers(deployment)
        command = container["command"]
        if not _is_worker(command):
            continue
        pool, concurrency = _option(command, "--pool"), int(_option(command, "--concurrency"))
        pool_size = int(_env(container)["DRIFTLESS_DB_POOL_SIZE"])
        if _queues(command) <= GREEN_QUEUES:
            # I/O-bound: many greenlets in one process, sharing a few connections.
            assert pool == "gevent" and concurrency >= 64
            assert pool_size * GREENLETS_PER_CONNECTION >= concurrency
        else:
            # Each prefork child runs one task at a time with its own engine.
            assert pool == "prefork"
            assert pool_size >= 1


def test_each_scaled_object_watches_the_queue_its_deployment_consumes() -> None:
    broker = urlsplit(_example_secret()["CELERY_BROKER_URL"])
    deployments = {d["metadata"]["name"]: d for d in _of_kind("Deployment")}
    for scaled in _of_kind("ScaledObject"):
        target = scaled["spec"]["scaleTargetRef"]
        assert target.get("kind", "Deployment") == "Deployment"
        command = _containers(deployments[target["name"]])[0]["command"]
        triggers = scaled["spec"]["triggers"]
        # One trigger per queue the Deployment consumes (the LLM one: both lanes).
        assert sorted(t["metadata"]["listName"] for t in triggers) == sorted(_queues(command))
        for trigger in triggers:
            # Celery's Redis transport: the queue is a list in the broker's database.
            assert trigger["metadata"]["address"] == f"{broker.hostname}:{broker.port}"
            assert trigger["metadata"]["databaseIndex"] == broker.path.lstrip("/")
            auth = _named("TriggerAuthentication", trigger["authenticationRef"]["name"])
            for ref in auth["spec"]["secretTargetRef"]:
                assert ref["name"] == "driftless-secrets" and ref["key"] in _example_secret()
        assert 1 <= scaled["spec"]["minReplicaCount"] <= scaled["spec"]["maxReplicaCount"]


def test_autoscaled_deployments_leave_replicas_to_their_one_autoscaler() -> None:
    autoscaled = _autoscaled()
    assert len(autoscaled) == len(set(autoscaled))
    assert set(autoscaled) == {d["metadata"]["name"] for d in _of_kind("Deployment")} - {
        "driftless-beat"
    }
    for name in autoscaled:
        assert "replicas" not in _named("Deployment", name)["spec"], name


def test_llm_workers_get_time_to_finish_a_call_before_they_are_killed() -> None:
    llm = _named("Deployment", "driftless-worker-llm")
    (container,) = _containers(llm)
    settings = load_settings(
        {**_named("ConfigMap", "driftless-config")["data"], **_example_secret(), **_env(container)}
    )
    # The gevent pool ends a task at task_time_limit; a call may end sooner by its own.
    longest = max(LLM_TASK_TIME_LIMIT_S, longest_llm_call_s(settings))
    assert llm["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] > longest


# --- containers ---------------------------------------------------------------------


def test_probes_match_what_each_process_serves() -> None:
    for deployment in _of_kind("Deployment"):
        (container,) = _containers(deployment)
        command = container["command"]
        if command[0] == "gunicorn":
            assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
            # Not /readyz: a shared dependency's outage must not empty the Service.
            assert container["readinessProbe"]["httpGet"]["path"] == "/healthz"
        elif _is_worker(command):
            # The worker's own Prometheus endpoint, on the port it is told to serve.
            probe = container["livenessProbe"]["httpGet"]
            (port,) = [p for p in container["ports"] if p["name"] == probe["port"]]
            assert probe["path"] == "/metrics"
            assert str(port["containerPort"]) == _env(container)["DRIFTLESS_WORKER_METRICS_PORT"]
            annotations = deployment["spec"]["template"]["metadata"]["annotations"]
            assert annotations["prometheus.io/port"] == str(port["containerPort"])
        else:
            assert "livenessProbe" in container, deployment["metadata"]["name"]


def test_every_container_runs_hardened_with_resources() -> None:
    for workload in _workloads():
        pod = workload["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["runAsUser"] != 0
        volumes = {v["name"]: v for v in pod.get("volumes", [])}
        for container in _containers(workload):
            security = container["securityContext"]
            assert security["readOnlyRootFilesystem"] is True
            assert security["allowPrivilegeEscalation"] is False
            assert security["capabilities"]["drop"] == ["ALL"]
            for kind in ("requests", "limits"):
                assert {"cpu", "memory"} <= set(container["resources"][kind])
            # Every path a process writes to is a mounted emptyDir.
            mounts = {m["mountPath"]: volumes[m["name"]] for m in container["volumeMounts"]}
            writable = ["/tmp", _env(container).get("PROMETHEUS_MULTIPROC_DIR", "/tmp")]
            for path in writable:
                assert "emptyDir" in mounts[path], (workload["metadata"]["name"], path)


def test_every_process_starts_with_the_configured_environment() -> None:
    shared = {**_named("ConfigMap", "driftless-config")["data"], **_example_secret()}
    for workload in _workloads():
        for container in _containers(workload):
            sources = sorted(ref["name"] for item in container["envFrom"] for ref in item.values())
            assert sources == ["driftless-config", "driftless-secrets"]
            environment = {**shared, **_env(container)}
            assert set(environment) - set(ENVIRONMENT) <= OTHER_VARIABLES
            try:
                load_settings(environment)
            except ConfigError as exc:
                pytest.fail(f"{workload['metadata']['name']}: {exc}")


# --- compose and the Dockerfile ---------------------------------------------------------


def _compose() -> dict[str, Any]:
    return dict(yaml.safe_load((ROOT / "deploy" / "compose.yaml").read_text()))


def _compose_value(value: str) -> str:
    """compose's `${VAR:-default}` as it reads with VAR unset."""
    return re.sub(r"\$\{\w+:-([^}]*)\}", r"\1", value)


def test_compose_runs_every_procfile_process_with_the_same_command() -> None:
    services = _compose()["services"]
    ours = {name: s for name, s in services.items() if s.get("image") == "driftless:local"}
    assert {PROCESS_OF_COMPONENT.get(name, name) for name in ours} == set(PROCFILE)
    for name, service in ours.items():
        process = PROCESS_OF_COMPONENT.get(name, name)
        command = [_expand(word, {"PORT": "8000"}) for word in service["command"]]
        assert _runs_as(command, process, {"PORT": "8000"}), name
    beats = [s for s in ours.values() if _is_beat(s["command"])]
    assert len(beats) == 1 and beats[0]["deploy"]["replicas"] == 2  # one active, one standby


def test_compose_environment_is_valid_for_every_process() -> None:
    for name, service in _compose()["services"].items():
        if service.get("image") != "driftless:local":
            continue
        environment = {k: _compose_value(str(v)) for k, v in service["environment"].items()}
        assert set(environment) - set(ENVIRONMENT) <= OTHER_VARIABLES | TRACING_VARIABLES, name
        load_settings(environment)
        if _is_worker(service["command"]) and _queues(service["command"]) <= GREEN_QUEUES:
            concurrency = int(_option(service["command"], "--concurrency"))
            pool_size = int(environment["DRIFTLESS_DB_POOL_SIZE"])
            assert pool_size * GREENLETS_PER_CONNECTION >= concurrency


def _dockerfile() -> list[tuple[str, str]]:
    """(instruction, arguments), continuation lines joined, comments dropped."""
    text = (ROOT / "deploy" / "Dockerfile").read_text()
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("#")]
    joined = re.sub(r"\\\n", " ", "\n".join(lines))
    return [
        (line.split(None, 1)[0].upper(), line.split(None, 1)[1])
        for line in joined.splitlines()
        if line.strip()
    ]


def test_the_image_is_multi_stage_slim_non_root_and_runs_the_web_by_default() -> None:
    instructions = _dockerfile()
    stages = [args for op, args in instructions if op == "FROM"]
    assert len(stages) >= 2
    (base,) = [args for op, args in instructions if op == "ARG" and args.startswith("PYTHON_IMAGE")]
    assert "-slim" in base
    (user,) = [args for op, args in instructions if op == "USER"]
    uid = user.split(":")[0]
    assert uid.isdigit() and int(uid) != 0  # numeric: runAsNonRoot can verify it
    pod_users = {
        w["spec"]["template"]["spec"]["securityContext"]["runAsUser"] for w in _workloads()
    }
    assert pod_users == {int(uid)}
    assert any(op == "HEALTHCHECK" for op, _ in instructions)
    installs = " ".join(args for op, args in instructions if op == "RUN" and "pip install" in args)
    assert "[dev" not in installs and "embedded" not in installs
    env = " ".join(args for op, args in instructions if op == "ENV")
    multiproc = re.search(r"PROMETHEUS_MULTIPROC_DIR=(\S+)", env)
    assert multiproc is not None
    for workload in _workloads():
        for container in _containers(workload):
            mounts = {m["mountPath"] for m in container["volumeMounts"]}
            assert multiproc.group(1) in mounts
    (cmd,) = [args for op, args in instructions if op == "CMD"]
    shell, flag, script = yaml.safe_load(cmd)  # the exec form is a JSON (so YAML) list
    assert (shell, flag) == ("sh", "-c") and script.startswith("exec ")
    port = re.search(r"\bPORT=(\d+)", env)
    assert port is not None
    web = [_expand(word, {"PORT": port.group(1)}) for word in shlex.split(script[5:])]
    assert web == [_expand(word, {"PORT": port.group(1)}) for word in PROCFILE["web"]]
