"""docker-compose.yml (Airflow 3.3 with CeleryExecutor) checked without a Docker engine.

1. Schema: the file, after Compose-style ``${VAR:-default}`` interpolation, validates against the Compose
   Specification JSON schema. The schema is vendored in tests/fixtures/compose-spec.json so the test runs
   offline: it is the official compose-spec schema (github.com/compose-spec/compose-spec, schema/compose-spec.json,
   Apache-2.0), byte-for-byte as shipped inside the PyPI wheel check-jsonschema==0.39.0
   (check_jsonschema/builtin_schemas/vendor/compose-spec.json, sha256 below). To refresh it:
   ``pip download --no-deps check-jsonschema==<v>`` and copy that file over, then update SCHEMA_SHA256.
2. References: every YAML alias has an anchor, every service and volume a service names is defined, every
   ``service_healthy`` dependency has a healthcheck, every bind-mount source and the Dockerfile exist.
3. Airflow wiring: each Airflow service has the same JWT secret and execution API URL (pointing at the
   api-server), the Celery/Postgres/Redis settings, and mounts dags/, templates/, expectations/ and ehrgym-data.
4. Deliberately broken documents are rejected, so the checks above cannot pass vacuously.
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
from pathlib import Path
from urllib.parse import urlparse

import jsonschema
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
COMPOSE_FILE = ROOT / "docker-compose.yml"
SCHEMA_FILE = Path(__file__).resolve().parent / "fixtures" / "compose-spec.json"
SCHEMA_SHA256 = "d549057ebc2925f39f62799eab0db7b9e2c18b35b6c00595199116da3ed10e64"

AIRFLOW_SERVICES = {"api-server", "scheduler", "dag-processor", "worker", "triggerer", "airflow-init"}
ALL_SERVICES = AIRFLOW_SERVICES | {"postgres", "redis"}
ANCHORS = {"airflow-common", "airflow-common-env", "airflow-common-depends-on"}
DATA_VOLUME, DATA_TARGET = "ehrgym-data", "/opt/ehrgym/data"


# ---------------------------------------------------------------- helpers

_VAR = re.compile(r"\$(?:\$|\{(?P<braced>[^}]*)\}|(?P<plain>[A-Za-z_][A-Za-z0-9_]*))")


def _interpolate_str(text: str, env: dict[str, str]) -> str:
    """Compose interpolation: ${V}, $V, ${V:-d}, ${V-d}, ${V:?e}, ${V?e}, ${V:+r}, ${V+r}; $$ is a literal $."""

    def sub(m: re.Match) -> str:
        if m.group(0) == "$$":
            return "$"
        expr = m.group("braced") if m.group("braced") is not None else m.group("plain")
        op = re.match(r"^([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?+])(.*))?$", expr, re.S)
        if not op:
            raise ValueError(f"invalid interpolation: {m.group(0)!r}")
        name, kind, arg = op.group(1), op.group(2), op.group(3) or ""
        val = env.get(name)
        if kind in (":-", "-"):
            use_default = val is None or (kind == ":-" and val == "")
            return _interpolate_str(arg, env) if use_default else val
        if kind in (":?", "?"):
            if val is None or (kind == ":?" and val == ""):
                raise ValueError(f"required variable {name} is missing: {arg}")
            return val
        if kind in (":+", "+"):
            present = val is not None and (kind == "+" or val != "")
            return _interpolate_str(arg, env) if present else ""
        return val or ""

    return _VAR.sub(sub, text)


def interpolate(node, env: dict[str, str]):
    if isinstance(node, str):
        return _interpolate_str(node, env)
    if isinstance(node, list):
        return [interpolate(x, env) for x in node]
    if isinstance(node, dict):
        return {k: interpolate(v, env) for k, v in node.items()}
    return node


def load_compose(text: str, env: dict[str, str] | None = None) -> dict:
    """Parse (anchors and << merges resolved, as Compose does) and interpolate with an empty environment."""
    doc = yaml.safe_load(text)
    assert isinstance(doc, dict), "a Compose file is a mapping"
    return interpolate(doc, env or {})


def anchors_and_aliases(text: str) -> tuple[set[str], set[str]]:
    anchors, aliases = set(), set()
    for event in yaml.parse(text, Loader=yaml.SafeLoader):
        if isinstance(event, yaml.AliasEvent):
            aliases.add(event.anchor)
        elif isinstance(event, yaml.NodeEvent) and event.anchor:
            anchors.add(event.anchor)
    return anchors, aliases


def env_of(service: dict) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) if "=" in item else (item, "") for item in env)
    return {k: "" if v is None else str(v) for k, v in env.items()}


def depends_on(service: dict) -> dict[str, dict]:
    dep = service.get("depends_on") or {}
    if isinstance(dep, list):
        return {name: {"condition": "service_started"} for name in dep}
    return dep


def mounts(service: dict) -> list[dict]:
    """Service volumes as long-syntax dicts (type, source, target)."""
    out = []
    for v in service.get("volumes") or []:
        if isinstance(v, dict):
            out.append({"type": v.get("type", "volume"), "source": v.get("source"), "target": v["target"]})
            continue
        parts = v.split(":")
        if len(parts) == 1:  # anonymous volume
            out.append({"type": "volume", "source": None, "target": parts[0]})
            continue
        source, target = parts[0], parts[1]
        kind = "bind" if source.startswith((".", "/", "~")) else "volume"
        out.append({"type": kind, "source": source, "target": target})
    return out


def schema_errors(doc: dict) -> list[str]:
    schema = json.loads(SCHEMA_FILE.read_text())
    validator = jsonschema.validators.validator_for(schema)(schema)
    return [f"{'/'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}" for e in validator.iter_errors(doc)]


def reference_errors(doc: dict) -> list[str]:
    """Names a service uses that the document does not define."""
    errors = []
    services = doc.get("services") or {}
    volumes = set(doc.get("volumes") or {})
    networks = set(doc.get("networks") or {}) | {"default"}
    for name, svc in services.items():
        refs = set(depends_on(svc))
        if isinstance(svc.get("extends"), dict) and "file" not in svc["extends"]:
            refs.add(svc["extends"]["service"])
        refs |= {v.split(":")[0] for v in svc.get("volumes_from") or [] if not v.startswith("container:")}
        refs |= {link.split(":")[0] for link in svc.get("links") or []}
        for key in ("network_mode", "ipc", "pid"):
            if str(svc.get(key, "")).startswith("service:"):
                refs.add(svc[key].split(":", 1)[1])
        errors += [f"service {name!r} names undefined service {r!r}" for r in sorted(refs - set(services))]
        for m in mounts(svc):
            if m["type"] == "volume" and m["source"] and m["source"] not in volumes:
                errors.append(f"service {name!r} mounts undefined volume {m['source']!r}")
        svc_networks = svc.get("networks") or []
        errors += [f"service {name!r} joins undefined network {n!r}" for n in sorted(set(svc_networks) - networks)]
        for dep, spec in depends_on(svc).items():
            if spec.get("condition") == "service_healthy" and "healthcheck" not in services.get(dep, {}):
                errors.append(f"service {name!r} waits for {dep!r} to be healthy but it has no healthcheck")
    return errors


# ---------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def text() -> str:
    return COMPOSE_FILE.read_text()


@pytest.fixture(scope="module")
def doc(text: str) -> dict:
    return load_compose(text)


# ---------------------------------------------------------------- the real file


def test_vendored_schema_is_the_official_one():
    raw = SCHEMA_FILE.read_bytes()
    assert hashlib.sha256(raw).hexdigest() == SCHEMA_SHA256, "compose-spec.json changed: update SCHEMA_SHA256"
    schema = json.loads(raw)
    assert schema["title"] == "Compose Specification" and schema["$id"] == "compose_spec.json"
    jsonschema.validators.validator_for(schema).check_schema(schema)


def test_compose_file_matches_compose_spec(doc: dict):
    assert schema_errors(doc) == []


def test_compose_file_also_valid_with_variables_set(text: str):
    env = {"AIRFLOW_UID": "1000", "AIRFLOW_JWT_SECRET": "s3cret", "EHRGYM_AIRFLOW_IMAGE": "me/airflow:dev"}
    doc = load_compose(text, env)
    assert schema_errors(doc) == []
    assert doc["services"]["worker"]["user"] == "1000:0"
    assert env_of(doc["services"]["scheduler"])["AIRFLOW__API_AUTH__JWT_SECRET"] == "s3cret"


def test_anchors_are_defined(text: str, doc: dict):
    anchors, aliases = anchors_and_aliases(text)
    assert aliases <= anchors, f"aliases without anchor: {sorted(aliases - anchors)}"
    assert ANCHORS <= anchors
    assert "x-airflow-common" in doc


def test_services_and_volumes_defined(doc: dict):
    assert set(doc["services"]) == ALL_SERVICES
    assert reference_errors(doc) == []
    assert DATA_VOLUME in doc["volumes"]


def test_airflow_services_share_jwt_secret_and_execution_api(doc: dict):
    services = doc["services"]
    built = {n for n, s in services.items() if isinstance(s.get("build"), dict)}
    assert built == AIRFLOW_SERVICES, "every Airflow service (and only those) builds the project image"
    envs = {name: env_of(services[name]) for name in AIRFLOW_SERVICES}
    for key in ("AIRFLOW__API_AUTH__JWT_SECRET", "AIRFLOW__CORE__EXECUTION_API_SERVER_URL", "AIRFLOW__API__SECRET_KEY"):
        values = {name: env.get(key) for name, env in envs.items()}
        assert all(values.values()), f"{key} missing on {[n for n, v in values.items() if not v]}"
        assert len(set(values.values())) == 1, f"{key} differs between services: {values}"
    url = urlparse(envs["worker"]["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"])
    assert url.hostname == "api-server" and url.path.rstrip("/").endswith("/execution")
    assert any(str(p).split(":")[-1] == str(url.port) for p in services["api-server"]["ports"])
    for name, env in envs.items():
        assert env["AIRFLOW__CORE__EXECUTOR"] == "CeleryExecutor", name
        assert env["AIRFLOW__CORE__LOAD_EXAMPLES"].lower() == "false", name
        assert urlparse(env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"]).hostname == "postgres", name
        assert urlparse(env["AIRFLOW__CELERY__RESULT_BACKEND"].removeprefix("db+")).hostname == "postgres", name
        assert urlparse(env["AIRFLOW__CELERY__BROKER_URL"]).hostname == "redis", name
        # SQLAlchemy 2.1 maps a bare postgresql:// to psycopg 3, which the Airflow image does not rely on
        for key in ("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", "AIRFLOW__CELERY__RESULT_BACKEND"):
            assert "postgresql+psycopg2://" in env[key], f"{name}: {key} should name the psycopg2 driver"


def test_commands_and_dependencies(doc: dict):
    services = doc["services"]
    commands = {n: services[n].get("command") for n in AIRFLOW_SERVICES - {"airflow-init"}}
    assert commands == {
        "api-server": "api-server",
        "scheduler": "scheduler",
        "dag-processor": "dag-processor",
        "worker": "celery worker",
        "triggerer": "triggerer",
    }
    assert env_of(services["airflow-init"]).get("_AIRFLOW_DB_MIGRATE") == "true"
    for name in AIRFLOW_SERVICES - {"airflow-init"}:
        dep = depends_on(services[name])
        assert dep["postgres"]["condition"] == "service_healthy", name
        assert dep["redis"]["condition"] == "service_healthy", name
        assert dep["airflow-init"]["condition"] == "service_completed_successfully", name
        assert "healthcheck" in services[name], name
    assert depends_on(services["worker"])["api-server"]["condition"] == "service_healthy"


def test_mounts(doc: dict):
    for name in AIRFLOW_SERVICES:
        svc = doc["services"][name]
        by_target = {m["target"]: m for m in mounts(svc)}
        dags_folder = env_of(svc).get("AIRFLOW__CORE__DAGS_FOLDER", "/opt/airflow/dags")
        assert by_target[dags_folder]["source"] == "./dags", name
        assert by_target["/opt/ehrgym/templates"]["source"] == "./templates", name
        assert by_target["/opt/ehrgym/expectations"]["source"] == "./expectations", name
        assert by_target[DATA_TARGET] == {"type": "volume", "source": DATA_VOLUME, "target": DATA_TARGET}, name
        for m in mounts(svc):
            if m["type"] == "bind" and m["source"].startswith("."):
                assert (ROOT / m["source"]).is_dir(), f"{name}: bind source {m['source']} missing"


def test_dockerfile_exists_and_installs_the_project(doc: dict):
    build = doc["x-airflow-common"]["build"]
    context = (ROOT / build.get("context", ".")).resolve()
    dockerfile = context / build.get("dockerfile", "Dockerfile")
    assert dockerfile.is_file(), f"{dockerfile} missing"
    lines = [ln.strip() for ln in dockerfile.read_text().splitlines() if ln.strip() and not ln.startswith("#")]
    args = {m.group(1): m.group(2) for ln in lines if (m := re.match(r"ARG (\w+)=(\S+)", ln))}
    args.update(build.get("args") or {})
    froms = [_interpolate_str(ln.split()[1], args) for ln in lines if ln.upper().startswith("FROM ")]
    assert froms == ["apache/airflow:3.3.2-python3.11"]
    for ln in lines:
        if ln.upper().startswith("COPY "):
            sources = [tok for tok in ln.split()[1:-1] if not tok.startswith("--")]
            for src in sources:
                assert (context / src).exists(), f"COPY source {src} missing from the build context"
    assert any("pip install" in ln and "/opt/ehrgym" in ln for ln in lines)


# ---------------------------------------------------------------- broken documents must fail


def _broken(doc: dict, how: str) -> dict:
    bad = copy.deepcopy(doc)
    svc = bad["services"]
    if how == "unknown-service-key":
        svc["scheduler"]["imagee"] = "typo"
    elif how == "bad-depends-on-condition":
        svc["worker"]["depends_on"]["redis"]["condition"] = "service_ready"
    elif how == "ports-not-a-list":
        svc["api-server"]["ports"] = {"8080": 8080}
    elif how == "unknown-top-level-key":
        bad["service"] = {}
    elif how == "healthcheck-wrong-type":
        svc["postgres"]["healthcheck"]["retries"] = ["five"]
    elif how == "bad-service-name":
        svc["bad name!"] = {"image": "x"}
    return bad


@pytest.mark.parametrize(
    "how",
    [
        "unknown-service-key",
        "bad-depends-on-condition",
        "ports-not-a-list",
        "unknown-top-level-key",
        "healthcheck-wrong-type",
        "bad-service-name",
    ],
)
def test_schema_rejects_broken_documents(doc: dict, how: str):
    assert schema_errors(_broken(doc, how)), f"schema accepted a broken document ({how})"


def test_broken_yaml_document_is_rejected():
    broken = """
name: broken
services:
  web:
    image: nginx
    ports: "80:80"
    restart: sometimes
    deploy: {replicas: many}
"""
    errors = schema_errors(load_compose(broken))
    assert any(e.startswith("services/web/ports:") for e in errors), errors


def test_reference_checks_reject_undefined_names(doc: dict, text: str):
    bad = copy.deepcopy(doc)
    bad["services"]["worker"]["depends_on"]["rabbitmq"] = {"condition": "service_healthy"}
    bad["services"]["scheduler"]["volumes"].append("ehrgym-cache:/cache")
    bad["services"]["redis"].pop("healthcheck")
    errors = reference_errors(bad)
    assert any("'rabbitmq'" in e for e in errors)
    assert any("'ehrgym-cache'" in e for e in errors)
    assert any("'redis'" in e and "healthcheck" in e for e in errors)
    # schema-valid but referentially broken: both checks are needed
    assert schema_errors(bad) == []
    with pytest.raises(yaml.composer.ComposerError):
        load_compose(text.replace("<<: *airflow-common-depends-on", "<<: *airflow-depends-typo", 1))


def test_interpolation():
    env = {"A": "x", "E": ""}
    assert _interpolate_str("${A}-${B:-d}-${E:-d}-${E-d}-$$HOME-$A", env) == "x-d-d--$HOME-x"
    assert _interpolate_str("${A:+r}${B:+r}", env) == "r"
    with pytest.raises(ValueError):
        _interpolate_str("${B:?needed}", env)
