"""A local model folder whose rounds train: tiny-small taught beforehand (in this process, under a second) to
answer any prompt with one digit, uniformly, so on one-digit sums it is right about one time in ten and its
groups have reward variance. (A random tiny model is never right, so it would never step.) For the tests
that start ``ftis-node join`` processes."""

from pathlib import Path

import torch

from ftis.node.demo.toml_file import write_toml
from ftis.node.models import load_policy
from ftis.node.tasks import make_task

ARITHMETIC = {"min_digits": 1, "max_digits": 1, "operations": "+"}


def digit_model(folder: Path, base: str = "tiny-small") -> Path:
    """``base`` (a built-in tiny model) trained to put uniform mass on the ten digits after any one-digit sum's
    prompt."""
    task = make_task("arithmetic", **ARITHMETIC)
    policy = load_policy(base, seed=0)
    tokenizer, model = policy.tokenizer, policy.model
    prompts = [tokenizer(task.prompt(task.problem("train", i)), add_special_tokens=False)["input_ids"]
               for i in range(64)]
    width = max(len(p) for p in prompts)
    ids = torch.tensor([[tokenizer.pad_token_id] * (width - len(p)) + p for p in prompts])  # (64, T) left-padded
    mask = (ids != tokenizer.pad_token_id).long()
    digits = torch.tensor(tokenizer.convert_tokens_to_ids(list("0123456789")))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    model.train()
    for _ in range(50):
        logprobs = model(input_ids=ids, attention_mask=mask).logits[:, -1].log_softmax(-1)  # (64, V)
        loss = -logprobs[:, digits].mean()  # cross-entropy against "any digit, equally likely"
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    digit_mass = logprobs[:, digits].exp().sum(-1).min().item()
    assert digit_mass > 0.9, f"the stand-in model puts only {digit_mass:.2f} on digits"
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def write_node_config(path: Path, model: Path, run_id: str, **sections: dict) -> Path:
    """A ``ftis-node join`` config for the digit model on one-digit sums: one-token completions, a checkpoint
    after every round, one line per step; ``sections`` override or add settings, table by table."""
    settings = {
        "model": {"name": str(model)},
        "task": {"name": "arithmetic", "arithmetic": ARITHMETIC},
        "generation": {"prompts_per_round": 6, "group_size": 8, "max_new_tokens": 1},
        "trainer": {"learning_rate": 1e-3},
        "swarm": {"run_id": run_id, "host_maddrs": ["/ip4/127.0.0.1/tcp/0"]},
        "metrics": {"display": "lines", "tensorboard": False},
        "checkpoint": {"every_rounds": 1, "keep_last": 2, "export_on_checkpoint": False},
    }
    for name, values in sections.items():
        settings[name] = {**settings.get(name, {}), **values}
    write_toml(path, settings)
    return path
