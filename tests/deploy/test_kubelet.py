"""The kubelet's rules the local run follows: variable expansion and where a path or port moves."""

from __future__ import annotations

from tests.deploy.kubelet import LocalPod, expand
from tests.deploy.manifests import daemon_containers, image


def test_variables_expand_as_the_kubelet_expands_them() -> None:
    defined = {"POD_NAME": "epochstate-0", "POD_NAMESPACE": "streaming"}
    assert (
        expand("$(POD_NAME).group.$(POD_NAMESPACE).svc:7070", defined)
        == "epochstate-0.group.streaming.svc:7070"
    )
    assert expand("$$(POD_NAME)", defined) == "$(POD_NAME)"  # escaped
    assert expand("$(UNDEFINED)-$(POD_NAME)", defined) == "$(UNDEFINED)-epochstate-0"
    assert expand("$POD_NAME", defined) == "$POD_NAME"


def test_paths_under_mounts_and_container_ports_move_once() -> None:
    daemon = next(d for d in daemon_containers() if d.workload["kind"] == "StatefulSet")
    pod = LocalPod(daemon, image(), {})
    try:
        root = str(pod.root)
        grpc = pod.ports[7070]
        assert pod.local("/var/lib/epochstate") == f"{root}/var/lib/epochstate"
        assert (
            pod.local("unix:///var/lib/epochstate/epochstate.sock")
            == f"unix://{root}/var/lib/epochstate/epochstate.sock"
        )
        assert pod.local("cert: /etc/epochstate/tls/tls.crt") == f"cert: {root}/etc/epochstate/tls/tls.crt"
        assert pod.local('["/tmp/x"]') == f'["{root}/tmp/x"]'
        assert pod.local("/var/lib/epochstateX") == "/var/lib/epochstateX"  # not a mount
        assert pod.local("/opt/var/lib/epochstate") == "/opt/var/lib/epochstate"  # not at a path's start
        assert pod.local("0.0.0.0:7070") == f"0.0.0.0:{grpc}"
        assert pod.local("9100") == str(pod.ports[9100])
        assert pod.local("host:17070") == "host:17070"
        # The root is itself under /tmp, a mount: one pass, so a moved path is not moved again.
        assert root.startswith("/tmp/")
        assert pod.local("/tmp /var/lib/epochstate") == f"{root}/tmp {root}/var/lib/epochstate"
    finally:
        pod.close()
