"""deploy/ offline: every kustomization renders, the output passes the Kubernetes API's strict
schemas of the releases users run and the Prometheus Operator's CRD schemas, and the
resources agree with each other (selectors, named ports, mounts, the daemon's settings)."""

from __future__ import annotations

import functools
from typing import Any

import jsonschema
import kubernetes_validate
import pytest

from tests.deploy.manifests import (
    KUSTOMIZATIONS,
    DaemonContainer,
    Resource,
    daemon_containers,
    everything,
    named,
    render,
)
from tests.deploy.manifests import image as dockerfile_image

# Native sidecars (initContainers[].restartPolicy) are on by default from 1.29 (beta) and GA in
# 1.33; the schemas kubernetes-validate ships end at the newest release it knows.
KUBERNETES = ("1.29.0", "1.30.0", "1.31.0", "1.32.0", "1.33.0", "1.34.0", "1.35.0", "1.36.0", "1.37.0")
MONITORING = "monitoring.coreos.com/v1"
CONTAINERS = list(daemon_containers())


def test_every_layout_is_rendered() -> None:
    assert set(KUSTOMIZATIONS) >= {
        "deploy/base",
        "deploy/group",
        "deploy/sidecar",
        "deploy/sidecar/driver-pod-template",
        "deploy/overlays/example",
    }
    assert {c.kustomization for c in CONTAINERS} >= {"deploy/group", "deploy/sidecar/driver-pod-template"}


@pytest.mark.parametrize("kustomization", KUSTOMIZATIONS)
@pytest.mark.parametrize("version", KUBERNETES)
def test_rendered_resources_pass_the_strict_api_schema(kustomization: str, version: str) -> None:
    for resource in render(kustomization):
        if resource["apiVersion"] == MONITORING:
            continue  # a CRD: see below
        try:
            kubernetes_validate.validate(resource, version, strict=True)
        except kubernetes_validate.ValidationError as error:
            where = "/".join(str(p) for p in error.path)
            pytest.fail(f"{resource['kind']} {resource['metadata']['name']} at {where}: {error.message}")


def test_an_unknown_field_would_be_refused() -> None:
    """The strict schema is strict: the checks above cannot pass by ignoring fields."""
    pod = next(r for r in render("deploy/sidecar/driver-pod-template") if r["kind"] == "Pod")
    pod["spec"]["initContainers"][0]["securityContxt"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(pod, KUBERNETES[-1], strict=True)


def _closed(schema: Any) -> Any:
    """``schema`` with every object closed to properties it does not name (the CRD's
    structural schema prunes unknown fields silently; here they fail)."""
    if isinstance(schema, dict):
        if "properties" in schema and "additionalProperties" not in schema:
            schema["additionalProperties"] = False
        for value in schema.values():
            _closed(value)
    elif isinstance(schema, list):
        for value in schema:
            _closed(value)
    return schema


@functools.cache
def crd_schema(kind: str) -> dict[str, Any]:
    """The JSON schema of a Prometheus Operator resource, from the package of models generated
    from the operator's published CRDs (cloudcoil-models-prometheus-operator)."""
    from cloudcoil.models.prometheus_operator import v1

    model = getattr(v1, kind)
    return dict(_closed(model.model_json_schema(by_alias=True)))


def monitors() -> list[Resource]:
    return [r for r in everything() if r["apiVersion"] == MONITORING]


def test_monitors_pass_the_prometheus_operator_crd_schema() -> None:
    found = monitors()
    assert {r["kind"] for r in found} == {"PodMonitor", "ServiceMonitor"}
    for resource in found:
        jsonschema.validate(resource, crd_schema(resource["kind"]))
    broken = {**found[0], "spec": {**found[0]["spec"], "scrapeInterval": "30s"}}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, crd_schema(broken["kind"]))


def _matches(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


@pytest.mark.parametrize("daemon", CONTAINERS, ids=lambda c: c.name)
def test_the_daemon_container_is_locked_down_and_probed(daemon: DaemonContainer) -> None:
    container, pod = daemon.container, daemon.pod_spec
    security = container["securityContext"]
    assert security["runAsNonRoot"] is True and security["runAsUser"] > 0
    assert security["allowPrivilegeEscalation"] is False
    assert security["readOnlyRootFilesystem"] is True
    assert security["capabilities"]["drop"] == ["ALL"]
    assert str(security["runAsUser"]) == dockerfile_image().user.split(":")[0]
    assert pod["securityContext"]["fsGroup"] == security["runAsGroup"]
    assert pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
    assert {"cpu", "memory"} <= container["resources"]["requests"].keys()
    assert "memory" in container["resources"]["limits"]
    if daemon.workload["kind"] == "Pod":  # the driver pod template: a native sidecar
        assert container in pod["initContainers"] and container["restartPolicy"] == "Always"
    # The probes ask grpc.health.v1 on a declared port; readiness the daemon as a whole,
    # liveness and startup the service that is SERVING until shutdown.
    for probe, service in (
        ("readinessProbe", ""),
        ("livenessProbe", "liveness"),
        ("startupProbe", "liveness"),
    ):
        grpc = container[probe]["grpc"]
        daemon.port(grpc["port"])
        assert grpc.get("service", "") == service, probe
    # Every path the daemon writes is a volume; the rest of the root is read-only.
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    env = {e["name"]: e for e in container["env"]}
    data_dir = env["EPOCHSTATE_DATA_DIR"]["value"]
    assert data_dir in mounts and not mounts[data_dir].get("readOnly")
    assert "/tmp" in mounts
    for path in ("/etc/epochstate/tls", "/etc/epochstate/zookeeper", "/etc/epochstate/config"):
        assert mounts[path]["readOnly"] is True
    volumes = {m["mountPath"]: daemon.volume(m["name"]) for m in container["volumeMounts"]}
    assert volumes["/etc/epochstate/tls"]["secret"]["secretName"] == "epochstate-tls"
    assert volumes["/etc/epochstate/zookeeper"]["secret"]["secretName"] == "epochstate-zookeeper"
    config = volumes["/etc/epochstate/config"]["configMap"]["name"]
    assert named(daemon.layout(), "ConfigMap", config)["data"]["daemon.yaml"]
    # The advertised address and the node name come from the downward API.
    downward = {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in env.values() if "valueFrom" in e}
    assert "metadata.name" in downward.values()
    assert env["EPOCHSTATE_NODE"]["value"] == "$(POD_NAME)"
    assert any(f"$({name})" in env["EPOCHSTATE_ADVERTISE"]["value"] for name in downward)
    # What the image exposes is what the container declares.
    assert {p["containerPort"] for p in container["ports"]} == dockerfile_image().exposed


@pytest.mark.parametrize("daemon", CONTAINERS, ids=lambda c: c.name)
def test_services_policies_and_monitors_find_the_daemon(daemon: DaemonContainer) -> None:
    labels = daemon.pod_labels
    resources = daemon.layout()
    policies = [r for r in resources if r["kind"] == "NetworkPolicy"]
    assert policies and all(_matches(p["spec"]["podSelector"]["matchLabels"], labels) for p in policies)
    allowed = {
        port["port"] for p in policies for rule in p["spec"]["ingress"] for port in rule.get("ports", [])
    }
    assert {"grpc", "metrics"} <= allowed
    for port in allowed:
        daemon.port(port)

    monitored = False
    for monitor in (r for r in resources if r["apiVersion"] == MONITORING):
        selector = monitor["spec"]["selector"]["matchLabels"]
        if monitor["kind"] == "PodMonitor":
            assert _matches(selector, labels)
            endpoints = monitor["spec"]["podMetricsEndpoints"]
            for endpoint in endpoints:
                daemon.port(endpoint["port"])
        else:
            services = [
                r for r in resources if r["kind"] == "Service" and _matches(selector, r["metadata"]["labels"])
            ]
            assert len(services) == 1
            (service,) = services
            assert _matches(service["spec"]["selector"], labels)
            service_ports = {p["name"]: p for p in service["spec"]["ports"]}
            endpoints = monitor["spec"]["endpoints"]
            for endpoint in endpoints:
                daemon.port(service_ports[endpoint["port"]]["targetPort"])
        assert all(
            e["scheme"] == "https" and e["tlsConfig"]["ca"]["secret"]["name"] == "epochstate-tls"
            for e in endpoints
        )
        assert all(e["honorLabels"] is True for e in endpoints)  # the Spark job's label "job" stays
        monitored = True
    assert monitored

    if daemon.workload["kind"] == "StatefulSet":
        spec = daemon.workload["spec"]
        assert _matches(spec["selector"]["matchLabels"], labels)
        headless = named(resources, "Service", spec["serviceName"])
        assert headless["spec"]["clusterIP"] == "None" and _matches(headless["spec"]["selector"], labels)
        for port in headless["spec"]["ports"]:
            daemon.port(port["targetPort"])
        env = {e["name"]: e.get("value", "") for e in daemon.container["env"]}
        assert (
            f".{spec['serviceName']}.$(POD_NAMESPACE).svc:{daemon.port('grpc')}"
            in env["EPOCHSTATE_ADVERTISE"]
        )
        budgets = [r for r in resources if r["kind"] == "PodDisruptionBudget"]
        assert len(budgets) == 1 and _matches(budgets[0]["spec"]["selector"]["matchLabels"], labels)
