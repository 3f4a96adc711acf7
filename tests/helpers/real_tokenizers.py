"""The real tokenizers in tests: finding them, a tiny GSM8K file, a Qwen2 stand-in that answers, its nodes' config.

``real_tokenizer(name)`` is the folder ``.ci/tokenizers`` wrote (``ftis.node.models.stand_in``); without it the
test is skipped with the command to run, or fails under ``FTIS_REQUIRE_REAL_TOKENIZERS=1`` (``.ci/run`` sets it,
so CI cannot pass by skipping).

``answering_stand_in``: the Qwen2 stand-in (random weights, ``build_stand_in``) taught beforehand, in this process
in a few seconds, to answer any prompt with ``<think> so </think>\\n<answer> D </answer>`` and stop, D one of
``DIGITS`` and the stop ``<|im_end|>`` or ``<|endoftext|>``, each equally likely. The fixture problems' answers
are those digits, so a completion is right about half the time, groups have reward variance (rounds train),
and completions end at both stop tokens. (A random model on 151,936 tokens is never right and never stops.)
"""

import json
from pathlib import Path

import pytest
import torch

from ftis.node.config import NodeConfig
from ftis.node.models import load_policy
from ftis.node.models.stand_in import build_stand_in, real_tokenizer_folder
from ftis.node.tasks import make_task
from ftis.node.tasks.prompts import prompt_ids
from helpers.real_models import found_or_skipped

REQUIRE = "FTIS_REQUIRE_REAL_TOKENIZERS"
RUN = "qwen2-real"
DIGITS = "35"  # the answers the stand-in gives, and the fixture problems' gold answers
ANSWER = "<think> so </think>\n<answer> {} </answer>"
END_OF_TEXT, IM_END = 151643, 151645  # Qwen2's <|endoftext|> and <|im_end|>
MAX_NEW_TOKENS = 20  # the taught answer is 16 tokens and its stop token
TEACHING_STEPS = 80
NEGATIVES = 4096  # tokens besides the answers' that the teaching softmax runs over
QUESTIONS = [  # GSM8K-like word problems whose answer is one of DIGITS
    ("Tom has 1 apple and buys 2 more. How many apples does Tom have?", "1 + 2 = 3\n#### 3"),
    ("A box holds 10 pens. Anna takes 5 of them. How many pens are left?", "10 - 5 = 5\n#### 5"),
    ("Sam reads 12 pages on Monday and 9 fewer on Tuesday. How many pages does he read on Tuesday?",
     "12 - 9 = 3\n#### 3"),
    ("A farmer has 15 eggs and sells 10. How many eggs does the farmer still have?", "15 - 10 = 5\n#### 5"),
]


def real_tokenizer(name: str) -> Path:
    """The folder of the real tokenizer ``name``; skips the test (fails under FTIS_REQUIRE_REAL_TOKENIZERS=1)
    when ``bash .ci/tokenizers`` has not been run."""
    return found_or_skipped(real_tokenizer_folder, name, REQUIRE)


def write_gsm8k(path: Path) -> Path:
    """``QUESTIONS`` as a GSM8K JSONL file (``question``, ``answer`` ending in ``#### <number>``)."""
    path.write_text("".join(json.dumps({"question": q, "answer": a}) + "\n" for q, a in QUESTIONS))
    return path


def node_config(model, gsm8k, adapter: str = "full", **sections: dict) -> NodeConfig:
    """Two GSM8K prompts × G = 4 per round in Qwen2's chat template (``chat_template = "auto"``); micro-batches of
    one group, since the trainer's logits over 151,936 tokens are 0.6 MB per position."""
    settings: dict[str, dict] = {
        "model": {"name": str(model), "adapter": adapter, "lora_rank": 8, "lora_alpha": 16.0},
        "task": {"name": "gsm8k", "data_files": {"train": str(gsm8k), "test": str(gsm8k)}},
        "generation": {"prompts_per_round": 2, "group_size": 4, "max_new_tokens": MAX_NEW_TOKENS},
        "trainer": {"learning_rate": 1e-3 if adapter == "lora" else 1e-4, "max_tokens_per_microbatch": 1024},
        "swarm": {"run_id": RUN},
        "metrics": {"display": "lines", "tensorboard": False},
    }
    for section, values in sections.items():
        settings[section] = {**settings.get(section, {}), **values}
    return NodeConfig.model_validate(settings)


def answering_stand_in(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The taught Qwen2 stand-in's folder, made once per test session (module docstring)."""
    folder = tmp_path_factory.getbasetemp() / "qwen2-answering"
    if (folder / "config.json").is_file():
        return folder
    random = build_stand_in(real_tokenizer("qwen2"), tmp_path_factory.getbasetemp() / "qwen2-stand-in")
    policy = load_policy(str(random))
    tokenizer, model = policy.tokenizer, policy.model
    task = make_task("gsm8k", data_files={"train": str(write_gsm8k(tmp_path_factory.mktemp("gsm8k") / "t.jsonl"))})
    prompts = [prompt_ids(tokenizer, task.prompt(task.problem("train", i)), chat=True).tolist()
               for i in range(len(QUESTIONS))]
    answers = [tokenizer(ANSWER.format(digit), add_special_tokens=False)["input_ids"] + [stop]
               for digit in DIGITS for stop in (IM_END, END_OF_TEXT)]  # 4 answers of the same length A
    rows = [prompt + answer for prompt in prompts for answer in answers]
    width, pad, answer_length = max(map(len, rows)), tokenizer.pad_token_id, len(answers[0])
    ids = torch.tensor([[pad] * (width - len(row)) + row for row in rows])  # (B, L) left-padded
    mask = (torch.arange(width) >= torch.tensor([width - len(row) for row in rows])[:, None]).long()  # (B, L)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)  # as the generator numbers a left-padded row's positions
    loss = teach(model, ids, mask, positions, answer_length)
    # Two fair choices (digit, stop) in A tokens: a converged model's loss is 2·ln 2 / A ≈ 0.08.
    assert loss < 0.2, f"the stand-in did not learn to answer (full-vocabulary loss {loss:.3f})"
    part = folder.with_name(folder.name + ".part")
    model.save_pretrained(part)
    tokenizer.save_pretrained(part)
    part.rename(folder)
    return folder


def teach(model, ids: torch.Tensor, mask: torch.Tensor, positions: torch.Tensor, answer_length: int) -> float:
    """Teacher-force the last ``answer_length`` tokens of the rows ``ids`` (B, L); returns the loss over the whole
    vocabulary afterwards.

    The softmax runs over the answers' tokens and ``NEGATIVES`` others drawn once, not all 151,936: that one
    costs ~0.4 s a step on a loaded 2-core machine (logits and their gradient, then Adam over the 9.7M embedding
    weights), this one ~40 ms. The embedding stays frozen but for the answers' rows (``delta``, added to them at
    the end), so the untaught tokens keep their small random logits, and the answers' grow far above them.
    """
    weight = model.get_input_embeddings().weight  # (V, H), tied to the output layer
    weight.requires_grad_(False)
    taught = torch.unique(ids[:, -answer_length:])  # (S,) the answers' tokens
    others = torch.randperm(weight.shape[0], generator=torch.Generator().manual_seed(0))[: NEGATIVES + len(taught)]
    candidates = torch.cat([taught, others[~torch.isin(others, taught)][:NEGATIVES]])  # (C,) answers' tokens first
    slot = torch.full((weight.shape[0],), -1)
    slot[candidates] = torch.arange(len(candidates))
    delta = torch.zeros(len(taught), weight.shape[1], requires_grad=True)  # (S, H)
    body = [parameter for parameter in model.parameters() if parameter.requires_grad]
    optimizer = torch.optim.Adam([*body, delta], lr=1e-2)

    def embeddings(batch: torch.Tensor) -> torch.Tensor:  # (B, L) -> (B, L, H), the answers' rows moved
        at = slot[batch]
        moved = torch.where((at >= 0) & (at < len(taught)), at, len(taught))
        return weight[batch] + torch.cat([delta, delta.new_zeros(1, delta.shape[1])])[moved]

    model.train()
    for _ in range(TEACHING_STEPS):
        hidden = model.model(inputs_embeds=embeddings(ids), attention_mask=mask,
                             position_ids=positions).last_hidden_state[:, -answer_length - 1 : -1]  # (B, A, H)
        outputs = torch.cat([weight[taught] + delta, weight[candidates[len(taught):]]])  # (C, H)
        logits = hidden @ outputs.T  # (B, A, C)
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), slot[ids[:, -answer_length:]].flatten())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()
    with torch.no_grad():
        weight[taught] += delta
        weight.requires_grad_(True)
        hidden = model.model(input_ids=ids, attention_mask=mask, position_ids=positions).last_hidden_state
        logits = model.lm_head(hidden[:, -answer_length - 1 : -1])  # (B, A, V)
        return torch.nn.functional.cross_entropy(logits.flatten(0, 1), ids[:, -answer_length:].flatten()).item()
