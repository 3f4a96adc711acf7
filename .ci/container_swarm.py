"""A swarm of containers from docker/compose.yaml, run with podman: the bootstrap and the two CPU nodes, each
node for a few rounds, then a record of what happened (``result.json``, read by tests/test_containers.py).

    python .ci/container_swarm.py --image ftis-node:cpu --rounds 6 --out runs/containers/result.json

The services are compose.yaml's own (image, command, entrypoint, volumes, network addresses), spelled as
``podman`` commands: Debian's podman-compose ignores ``depends_on: condition: service_healthy``, so this waits
for the bootstrap's health check itself, as compose would. Each node gets ``--rounds`` and must exit 0 by
itself; the bootstrap is stopped with SIGTERM and must exit 0 too. What each service's volumes show a container
is recorded as well: the key files it can see (its own only), the bootstrap's published address, and whether it
can write the public volume (the bootstrap alone). Everything is removed afterwards (the volumes too: a rerun
starts from fresh identities).
"""

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
COMPOSE = REPO / "docker" / "compose.yaml"
PROJECT = "ftis-ci"  # prefix of every container, network and volume this makes
NODES = ("node-small", "node-medium")
IDENTITY = "/data/identity"
# Run in a container with a service's volumes: what it can see of the key files and of the public volume.
PROBE = """
import json, os
public = "/data/public/bootstrap.maddr"
try:
    open("/data/public/.probe", "w").close()
    os.unlink("/data/public/.probe")
    writable = "yes"
except OSError as error:
    writable = os.strerror(error.errno)
print(json.dumps({"keys": sorted(os.listdir("/data/identity")), "public_writable": writable,
                  "public": open(public).read().strip() if os.path.exists(public) else None}))
"""


def podman(*args: str, check: bool = True, timeout: float | None = 120) -> subprocess.CompletedProcess:
    done = subprocess.run(["podman", *args], capture_output=True, text=True, timeout=timeout)
    if check and done.returncode != 0:
        raise SystemExit(f"podman {' '.join(args[:2])} failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
    return done


def volume_args(service: dict) -> list[str]:
    """``--volume`` arguments for a compose service's named volumes, with their mode (``ro``)."""
    args = []
    for volume in service.get("volumes", []):
        source, target, *mode = volume.split(":")
        options = ",".join(mode).split(",") if mode else []
        if "ro" not in options:
            # Docker gives a new named volume the ownership of the image's folder; podman 4.3 does not for an empty
            # one, so ``U`` gives it to the image's user (uid 10001), as Docker would.
            options.append("U")
        args += ["--volume", f"{PROJECT}-{source}:{target}:{','.join(options)}"]
    return args


def identity_volume(service: dict) -> str:
    """The podman name of the volume a service keeps its key file in."""
    (source,) = [v.split(":")[0] for v in service["volumes"] if v.split(":")[1] == IDENTITY]
    return f"{PROJECT}-{source}"


def service_args(name: str, service: dict, subnet_name: str, image: str, extra: list[str]) -> list[str]:
    """``podman run`` arguments for one compose service (detached, on the compose network at its address)."""
    args = ["run", "--detach", "--name", f"{PROJECT}-{name}", "--network", subnet_name]
    address = service["networks"]["swarm"]["ipv4_address"]
    args += ["--ip", address, *volume_args(service)]
    entrypoint = service.get("entrypoint")
    if entrypoint:
        args += ["--entrypoint", json.dumps(entrypoint[:1])]
    args.append(image)
    if entrypoint:
        # compose writes $$ for a literal $; the entrypoint's remaining words come before the command
        args += [word.replace("$$", "$") for word in entrypoint[1:]]
    return [*args, *service["command"], *extra]


def healthy(service: dict) -> bool:
    test = service["healthcheck"]["test"]
    assert test[0] == "CMD-SHELL", test
    command = test[1].replace("$$", "$")
    result = podman("exec", f"{PROJECT}-bootstrap", "sh", "-c", command, check=False, timeout=90)
    return result.returncode == 0


def node_summary(runs: Path, name: str) -> dict:
    """What the node's metrics.jsonl says: rounds trained, the peer groups it trained on, from whom."""
    metrics = runs / name / "metrics.jsonl"
    lines = metrics.read_text().splitlines() if metrics.exists() else []
    records = [json.loads(line) for line in lines if line.strip()]
    steps = [r for r in records if "own_groups" in r]  # step records (records/record_kinds.py)
    by_peer: dict[str, int] = {}
    for record in steps:
        for peer, count in (record.get("peer_groups_by_peer") or {}).items():
            by_peer[peer] = by_peer.get(peer, 0) + int(count)
    return {"records": len(steps), "trained_steps": sum(1 for r in steps if r.get("train_trained")),
            "peer_groups_used": sum(int(r.get("peer_groups_used") or 0) for r in steps),
            "peer_groups_by_peer": by_peer,
            "checkpoints": sorted(p.name for p in (runs / name / "checkpoints").glob("round-*")),
            "export": sorted(p.name for p in (runs / name / "export").glob("*"))}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--image", default="ftis-node:cpu")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds for the whole swarm")
    parser.add_argument("--out", type=Path, required=True)
    options = parser.parse_args()
    compose = yaml.safe_load(COMPOSE.read_text())
    services = compose["services"]
    network = f"{PROJECT}-swarm"
    subnet = compose["networks"]["swarm"]["ipam"]["config"][0]["subnet"]
    started = time.monotonic()
    result: dict = {"image": options.image, "rounds": options.rounds, "services": {}}
    containers = [f"{PROJECT}-{name}" for name in ("bootstrap", *NODES)]
    volumes = [f"{PROJECT}-{name}" for name in compose["volumes"]]
    _clean(containers, volumes, network)
    try:
        podman("network", "create", "--subnet", subnet, network)
        podman(*service_args("bootstrap", services["bootstrap"], network, options.image, []))
        while not healthy(services["bootstrap"]):
            state = podman("inspect", "--format", "{{.State.Status}}", f"{PROJECT}-bootstrap").stdout.strip()
            if state != "running":
                logs = podman("logs", "--tail", "20", f"{PROJECT}-bootstrap", check=False)
                raise SystemExit(f"the bootstrap is {state}:\n{logs.stdout}{logs.stderr}")
            if time.monotonic() - started > 180:
                raise SystemExit("the bootstrap's health check did not pass within 180 s")
            time.sleep(5)
        result["bootstrap_healthy_after_s"] = round(time.monotonic() - started, 1)
        print(f"bootstrap healthy after {result['bootstrap_healthy_after_s']} s", flush=True)
        for name in NODES:
            podman(*service_args(name, services[name], network, options.image, ["--rounds", str(options.rounds)]))
        for name in NODES:
            left = max(1.0, options.timeout - (time.monotonic() - started))
            waited = podman("wait", f"{PROJECT}-{name}", timeout=left)
            result["services"][name] = {"exit_code": int(waited.stdout.strip().splitlines()[-1])}
            print(f"{name} exited {result['services'][name]['exit_code']}", flush=True)
        result["refusals"] = refusals(services, options.image)
        result["views"] = {name: view(services[name], options.image) for name in ("bootstrap", *NODES)}
        podman("stop", "--time", "30", f"{PROJECT}-bootstrap", timeout=60)
        inspect = podman("inspect", "--format", "{{.State.ExitCode}}", f"{PROJECT}-bootstrap")
        result["services"]["bootstrap"] = {"exit_code": int(inspect.stdout.strip())}
        runs = _mountpoint(f"{PROJECT}-runs")
        for name, folder in (("node-small", "small"), ("node-medium", "medium")):
            result["services"][name].update(node_summary(runs, folder))
        for name in ("bootstrap", *NODES):
            command = services[name]["command"]
            key = Path(command[command.index("--identity") + 1]).relative_to(IDENTITY)
            result["services"][name]["peer_id"] = _peer_id(_mountpoint(identity_volume(services[name])) / key)
        for name in ("bootstrap", *NODES):
            result["services"][name]["log_tail"] = podman("logs", "--tail", "15", f"{PROJECT}-{name}",
                                                          check=False).stdout.splitlines()[-15:]
    finally:
        result["seconds"] = round(time.monotonic() - started, 1)
        options.out.parent.mkdir(parents=True, exist_ok=True)
        options.out.write_text(json.dumps(result, indent=1) + "\n")
        _clean(containers, volumes, network)
    print(json.dumps({name: {k: v for k, v in s.items() if k != "log_tail"}
                      for name, s in result["services"].items()}, indent=1))
    codes = [s.get("exit_code") for s in result["services"].values()]
    return 0 if codes and all(code == 0 for code in codes) else 1


def view(service: dict, image: str) -> dict:
    """What a container with this service's volumes sees: the key files, the bootstrap's published address, and
    whether it can write the public volume (``yes``, or the error a write gets)."""
    done = podman("run", "--rm", *volume_args(service), "--entrypoint", "python", image, "-c", PROBE, timeout=120)
    return json.loads(done.stdout.strip().splitlines()[-1])


def refusals(services: dict, image: str) -> dict:
    """Start-up errors a container user meets, each provoked once while the swarm's bootstrap runs: its port
    taken (a second bootstrap in its network namespace), a node folder on a bind mount the image's user cannot
    write (a root-owned host folder), and no volume for the identity (the image's VOLUME then gets an anonymous
    one, lost with the container), for a node and for a bootstrap. Each must end the container at once with a
    line that says so."""
    bootstrap = services["bootstrap"]["command"]
    node = [*services["node-small"]["command"], "--rounds", "1"]
    cases = {
        "port_taken": ["--network", f"container:{PROJECT}-bootstrap", image, *bootstrap[:3]],
        "unwritable_bind_mount": ["--volume", f"{identity_volume(services['node-small'])}:{IDENTITY}:U",
                                  "--volume", f"{_root_owned_folder()}:/data/runs", image, *node],
        "no_identity_volume": [image, *node],
        "no_identity_volume_bootstrap": [image, *bootstrap],
    }
    found = {}
    for name, args in cases.items():
        started = time.monotonic()
        done = podman("run", "--rm", *args, check=False, timeout=300)
        lines = (done.stdout + done.stderr).strip().splitlines()
        found[name] = {"exit_code": done.returncode, "seconds": round(time.monotonic() - started, 1),
                       "error": next((line for line in lines if line.startswith("error:")), lines[-1:])}
    return found


def _root_owned_folder() -> Path:
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix="ftis-ci-root-owned-"))
    folder.chmod(0o755)  # root's, not writable by the image's user (uid 10001)
    return folder


def _mountpoint(volume: str) -> Path:
    return Path(podman("volume", "inspect", "--format", "{{.Mountpoint}}", volume).stdout.strip())


def _peer_id(key: Path) -> str:
    """The peer id an identity key gives (``ftis-node identity``, run here: the file is the node's own)."""
    command = [sys.executable, "-m", "ftis.node.cli", "identity", str(key)]
    return subprocess.run(command, check=True, capture_output=True, text=True, timeout=60).stdout.strip()


def _clean(containers: list[str], volumes: list[str], network: str) -> None:
    podman("rm", "--force", "--ignore", "--volumes", *containers, check=False)
    podman("volume", "rm", "--force", *volumes, check=False)
    podman("network", "rm", "--force", network, check=False)


if __name__ == "__main__":
    sys.exit(main())
