"""Models built from a seed get the same weights when other threads build models at the same time
(``node/models/seeding.py``): a warm start depends on its recipe, not on timing.

Run: python -m pytest tests/test_models_seeding.py -q
"""

from concurrent.futures import ThreadPoolExecutor

import torch

from ftis.node.models import load_policy
from ftis.node.models.tiny import build_tiny_model


def flat(model: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def test_models_built_in_threads_at_once_have_the_weights_each_seed_gives_alone():
    alone = {name: flat(build_tiny_model(name, seed=0)) for name in ("tiny-small", "tiny-medium")}
    lora_alone = flat(load_policy("tiny-small", adapter="lora", seed=3, lora_rank=4, lora_alpha=8).model)
    jobs = [("tiny-small", "full"), ("tiny-medium", "full"), ("tiny-small", "lora")] * 4
    with ThreadPoolExecutor(len(jobs)) as pool:
        built = list(pool.map(
            lambda job: (job, flat(build_tiny_model(job[0], seed=0)) if job[1] == "full" else flat(
                load_policy(job[0], adapter="lora", seed=3, lora_rank=4, lora_alpha=8).model)), jobs))
    for (name, adapter), weights in built:
        assert torch.equal(weights, alone[name] if adapter == "full" else lora_alone), (name, adapter)
