"""The config file of a tiny node that ``ftis-node join`` runs in the swarm tests: a small round (2 prompts × 4
completions of at most 8 tokens), ``rounds`` mode, on 127.0.0.1 with quick announcements and polls."""

from pathlib import Path


def write_join_config(folder: Path, *, model: str, adapter: str, run_id: str, round_deadline_s: float,
                      min_peers: int) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "node.toml"
    path.write_text(f"""
[model]
name = "{model}"
adapter = "{adapter}"
lora_rank = 8
lora_alpha = 16.0

[generation]
prompts_per_round = 2
group_size = 4
max_new_tokens = 8
batch_size = 8

[loop]
mode = "rounds"
round_deadline_s = {round_deadline_s}
min_peers = {min_peers}

[swarm]
run_id = "{run_id}"
host_maddrs = ["/ip4/127.0.0.1/tcp/0"]
announce_interval_s = 1.0
poll_interval_s = 0.25
""")
    return path
