"""deploy/'s traces: compose's optional `tracing` profile (a collector and Jaeger), the
collector's configuration, and the OpenTelemetry variables every driftless process is
given, read as data (no Docker here). Without an endpoint nothing changes; with the one
docs/deploy.md gives, the processes send to the profile's collector, which hands the
traces it keeps to Jaeger."""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from shared.infra import tracing
from tests.unit.test_deploy_manifests import K8S, ROOT, TRACING_VARIABLES, _compose, _expand

PROFILE = "tracing"
COLLECTOR, JAEGER = "otel-collector", "jaeger"
# What docs/deploy.md tells an operator to set: the collector's OTLP/HTTP port.
DOCUMENTED_ENDPOINT = "http://otel-collector:4318"
# The collector's parts the configuration may name (contrib's, as pinned).
COMPONENT_SECTIONS = ("receivers", "processors", "exporters", "connectors", "extensions")
TAIL_POLICY_TYPES = {
    "always_sample", "latency", "numeric_attribute", "probabilistic", "status_code",
    "string_attribute", "trace_state", "rate_limiting", "span_count", "boolean_attribute",
    "ottl_condition", "and", "drop", "composite",
}  # fmt: skip


def _services() -> dict[str, dict[str, Any]]:
    return dict(_compose()["services"])


def _ours() -> dict[str, dict[str, Any]]:
    return {name: s for name, s in _services().items() if s.get("image") == "driftless:local"}


def _collector_config() -> dict[str, Any]:
    """The file compose mounts as the collector's configuration."""
    (mount,) = _services()[COLLECTOR]["volumes"]
    source, target = mount.split(":")[:2]
    assert target in " ".join(_services()[COLLECTOR]["command"])
    config: dict[str, Any] = yaml.safe_load((ROOT / "deploy" / source).read_text())
    return config


def _host_port(endpoint: str) -> tuple[str, int]:
    host, port = endpoint.removeprefix("http://").rsplit(":", 1)
    return host, int(port)


@pytest.fixture
def environment(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    """A process environment without the test runner's own OpenTelemetry variables."""
    for name in [name for name in os.environ if name.startswith("OTEL_")]:
        monkeypatch.delenv(name)
    yield monkeypatch


def _as_compose_gives(monkeypatch: pytest.MonkeyPatch, shell: dict[str, str]) -> None:
    """The web service's OpenTelemetry variables as compose sets them from `shell`."""
    for name, value in _ours()["web"]["environment"].items():
        if name.startswith("OTEL_"):
            monkeypatch.setenv(name, _expand(str(value), shell))


# --- the profile -------------------------------------------------------------------------


def test_44_the_tracing_profile_holds_the_collector_and_jaeger_and_nothing_else() -> None:
    services = _services()
    profiled = {name for name, s in services.items() if "profiles" in s}
    assert profiled == {COLLECTOR, JAEGER}
    for name in profiled:
        assert services[name]["profiles"] == [PROFILE], name
        # Pinned: a release's tag, never `latest`.
        tag = services[name]["image"].rsplit(":", 1)[1]
        assert re.fullmatch(r"\d+\.\d+\.\d+", tag), services[name]["image"]
    assert services[COLLECTOR]["image"].startswith("otel/opentelemetry-collector-contrib:")
    assert services[JAEGER]["image"].startswith("jaegertracing/jaeger:2.")
    # Jaeger's UI is published; a default `up` starts neither (no service needs them).
    assert "16686:16686" in services[JAEGER]["ports"]
    for name, service in services.items():
        depends = service.get("depends_on", {})
        if name not in profiled:
            assert not set(depends) & profiled, name


def test_44_the_collectors_pipeline_names_only_components_it_defines() -> None:
    config = _collector_config()
    pipelines = config["service"]["pipelines"]
    assert set(pipelines) == {"traces"}
    for pipeline in pipelines.values():
        for section in ("receivers", "processors", "exporters"):
            for component in pipeline.get(section, []):
                assert component in config[section], (section, component)
    assert set(config) <= {*COMPONENT_SECTIONS, "service"}
    # Everything defined is used: a processor left out of the pipeline does nothing.
    used = {c for p in pipelines.values() for s in ("receivers", "processors", "exporters")
            for c in p.get(s, [])}  # fmt: skip
    defined = {c for s in ("receivers", "processors", "exporters") for c in config[s]}
    assert used == defined
    # Sampling first, then batching: the tail sampler regroups spans by trace.
    assert pipelines["traces"]["processors"] == ["tail_sampling", "batch"]


def test_44_the_collector_listens_where_the_processes_send_and_sends_to_jaeger() -> None:
    config, services = _collector_config(), _services()
    protocols = config["receivers"]["otlp"]["protocols"]
    # Reachable from the other containers (the receiver's default is localhost only).
    assert protocols["grpc"]["endpoint"] == "0.0.0.0:4317"
    assert protocols["http"]["endpoint"] == "0.0.0.0:4318"
    host, port = _host_port(DOCUMENTED_ENDPOINT)
    assert host == COLLECTOR and protocols["http"]["endpoint"].endswith(f":{port}")
    # Exported to Jaeger's OTLP/gRPC port, which Jaeger is told to open beyond localhost.
    (exporter,) = config["exporters"].values()
    jaeger_host, jaeger_port = _host_port(exporter["endpoint"])
    assert jaeger_host == JAEGER and jaeger_port == 4317
    assert (
        f"--set=receivers.otlp.protocols.grpc.endpoint=0.0.0.0:{jaeger_port}"
        in (services[JAEGER]["command"])
    )
    assert exporter["tls"]["insecure"] is True  # compose's network has no certificates


def test_44_tail_sampling_keeps_errors_slow_traces_and_a_share_of_the_rest() -> None:
    sampler = _collector_config()["processors"]["tail_sampling"]
    policies = {policy["type"]: policy for policy in sampler["policies"]}
    assert len(policies) == len(sampler["policies"])
    for kind, policy in policies.items():
        assert kind in TAIL_POLICY_TYPES, kind
        assert set(policy) <= {"name", "type", kind}, policy["name"]
    assert set(policies) == {"status_code", "latency", "probabilistic"}
    assert policies["status_code"]["status_code"]["status_codes"] == ["ERROR"]
    assert policies["latency"]["latency"]["threshold_ms"] > 0
    assert 0 < policies["probabilistic"]["probabilistic"]["sampling_percentage"] < 100
    # Decisions outlive the traces held in memory, so late spans follow their trace's.
    cache = sampler["decision_cache"]
    assert min(cache["sampled_cache_size"], cache["non_sampled_cache_size"]) > sampler["num_traces"]


# --- the processes' variables ----------------------------------------------------------------


def test_44_every_driftless_process_passes_the_otel_variables_through() -> None:
    assert {"web", "worker-llm", "beat"} <= set(_ours())
    for name, service in _ours().items():
        passed = {k: str(v) for k, v in service["environment"].items() if k.startswith("OTEL_")}
        assert set(passed) == TRACING_VARIABLES, name
        for variable, value in passed.items():
            # From the shell, with a default: `${NAME:-…}`.
            assert re.fullmatch(rf"\$\{{{variable}:-[^}}]*\}}", value), (name, value)
        # The endpoint's default is empty: off unless asked for.
        assert _expand(passed["OTEL_EXPORTER_OTLP_ENDPOINT"], {}) == ""


def test_44_without_an_endpoint_traces_stay_off(environment: pytest.MonkeyPatch) -> None:
    _as_compose_gives(environment, {})
    assert tracing.wanted() is None
    # The switch itself: the same variables with the documented endpoint turn it on.
    _as_compose_gives(environment, {"OTEL_EXPORTER_OTLP_ENDPOINT": DOCUMENTED_ENDPOINT})
    assert tracing.wanted() == "otlp"


def test_44_with_the_documented_endpoint_the_sdk_reads_compose_values_without_complaint(
    environment: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """compose's defaults are the SDK's own: an empty sampler name would be logged as
    unknown at every start, and an empty resource list would name the process ''."""
    _as_compose_gives(environment, {"OTEL_EXPORTER_OTLP_ENDPOINT": DOCUMENTED_ENDPOINT})
    with caplog.at_level(logging.WARNING):
        sampler = tracing._env_sampler()
        resource = tracing.resource(tracing.SERVICE_WEB)
    assert [record.getMessage() for record in caplog.records] == []
    assert sampler.get_description().startswith("ParentBased{root:AlwaysOnSampler")
    assert resource.attributes["service.name"] == tracing.SERVICE_WEB
    assert urlsplit(DOCUMENTED_ENDPOINT).hostname in _services()


def test_44_kubernetes_otel_settings_are_commented_and_load_once_uncommented(
    environment: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    text = (K8S / "configmap.yaml").read_text()
    live = yaml.safe_load(text)["data"]
    assert not [name for name in live if name.startswith("OTEL_")]  # off by default
    uncommented = re.sub(r"(?m)^  # (OTEL_\w+: )", r"  \1", text)
    data = yaml.safe_load(uncommented)["data"]
    added = set(data) - set(live)
    assert added and added <= TRACING_VARIABLES  # never one service name for every process
    for name in added:
        environment.setenv(name, str(data[name]))
    with caplog.at_level(logging.WARNING):
        assert tracing.wanted() == "otlp"
        sampler = tracing._env_sampler()
    assert [record.getMessage() for record in caplog.records] == []
    assert "TraceIdRatioBased{0.05}" in sampler.get_description()
