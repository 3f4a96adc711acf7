"""Groups of a peer with another tokenizer: rebuilt from their texts in this node's tokens (``text_groups.py``),
scored on those texts, and trained per sequence (``loss/sequence.py``) in micro-batches of their own.

The other tokenizer here is the tiny models' character vocabulary in another order: every id means another
character, so nothing of the generator's ids can be used, and the fingerprint differs.

Run: python -m pytest tests/test_cross_tokenizer.py -q
"""

import numpy as np
import pytest
import torch
from helpers.nodes import DigitTask, make_node
from tokenizers import AddedToken, Tokenizer, decoders, models
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from ftis.node.config import LossConfig, TrainerConfig
from ftis.node.intake.scoring import score_batch
from ftis.node.intake.text_groups import MAX_CHARACTERS_PER_TOKEN, RETOKENIZED_PER_TOKEN, Retokenizer, end_of_turn
from ftis.node.models.tokenizer import (
    CHARACTERS,
    EOS,
    PAD,
    SPECIAL_TOKENS,
    TAGS,
    UNK,
    build_tokenizer,
    tokenizer_fingerprint,
)
from ftis.node.swarm.memory import MemoryHub
from ftis.node.tasks.prompts import prompt_ids
from ftis.node.trainer.groups import TrainingGroup, advantage_groups
from ftis.node.trainer.packing import micro_batches
from ftis.node.trainer.trainer import Trainer
from ftis.protocol import Completion, Group, PolicyInfo, RolloutBatch, SamplingSettings, TaskRef, TokenizerInfo
from ftis.protocol.schema import CompletionColumns

MAX_NEW_TOKENS = 6


def reversed_tokenizer() -> PreTrainedTokenizerFast:
    """The character tokenizer with its characters in reverse order: the same texts, other ids."""
    vocabulary = (*SPECIAL_TOKENS, *TAGS, *reversed(CHARACTERS))
    backend = Tokenizer(models.BPE(vocab={token: i for i, token in enumerate(vocabulary)}, merges=[], unk_token=UNK))
    backend.decoder = decoders.Fuse()
    backend.add_special_tokens([AddedToken(token, special=True, normalized=False) for token in SPECIAL_TOKENS])
    backend.add_tokens([AddedToken(tag, special=False, normalized=False) for tag in TAGS])
    return PreTrainedTokenizerFast(tokenizer_object=backend, pad_token=PAD, eos_token=EOS, unk_token=UNK)


OWN, OTHER = build_tokenizer(), reversed_tokenizer()
TASK = DigitTask()


def test_the_two_tokenizers_differ():
    assert tokenizer_fingerprint(OWN) != tokenizer_fingerprint(OTHER)
    assert OWN.encode("say 3:") != OTHER.encode("say 3:")
    assert OWN.decode(OWN.encode("say 3:")) == OTHER.decode(OTHER.encode("say 3:")) == "say 3:"


def other_batch(texts: list[list[str]], *, index: int = 7, dataset: str = "digits", split: str = "train",
                logprob: float = -0.5, finish: str = "stop", with_texts: bool = True,
                tokenizer: PreTrainedTokenizerFast = OTHER) -> RolloutBatch:
    """A batch generated under ``tokenizer``: each group's completions are ``texts``, encoded with its ids."""
    groups = []
    for g, group_texts in enumerate(texts):
        completions = []
        for text in group_texts:
            ids = np.array([*tokenizer.encode(text), tokenizer.eos_token_id] if finish == "stop"
                           else tokenizer.encode(text))
            completions.append(Completion(ids, np.full(len(ids), logprob, np.float32), 0.0, finish,
                                          text if with_texts else None))
        prompt = prompt_ids(tokenizer, TASK.prompt(TASK.problem(split, index + g)), chat=False)
        groups.append(Group(f"bob/0/{g}", TaskRef(dataset, split, index + g, ""), prompt, tuple(completions)))
    return RolloutBatch("run", "bob", 0, 1.0, PolicyInfo("other-model", "", "full", 0),
                        TokenizerInfo(tokenizer_fingerprint(tokenizer), len(tokenizer)),
                        SamplingSettings(1.0, 1.0, 0, 16),
                        tuple(groups))


def score(batch: RolloutBatch, retokenizer: Retokenizer | None = None, **settings):
    retokenizer = retokenizer or Retokenizer.for_node(OWN, chat=False, max_new_tokens=MAX_NEW_TOKENS)
    return score_batch(batch, TASK, OWN, trust_peer_answers=False, off_policy=True, vocab_size=len(OWN),
                       fingerprint=tokenizer_fingerprint(OWN), retokenizer=retokenizer, **settings)


def test_a_group_of_another_tokenizer_is_rebuilt_in_this_nodes_tokens_from_its_texts():
    batch = other_batch([["3", "no", "7 or 8"]], logprob=-0.25)
    scored = score(batch)
    assert scored.per_sequence and scored.unusable == 0
    (group,) = scored.groups
    problem = TASK.problem("train", 7)
    assert np.array_equal(group.prompt_ids, prompt_ids(OWN, TASK.prompt(problem), chat=False))  # rendered here
    assert group.per_sequence and group.off_policy and group.peer_id == "bob"
    ends = np.cumsum(group.completions.lengths)
    own_rows = np.split(group.completions.token_ids, ends[:-1])
    assert [row.tolist() for row in own_rows] == [[*OWN.encode(t), OWN.eos_token_id] for t in ("3", "no", "7 or 8")]
    assert group.rewards.tolist() == [1.0, 0.0, 1.0]  # scored on the texts, by this node's task
    generator_lengths = [len(OTHER.encode(t)) + 1 for t in ("3", "no", "7 or 8")]
    assert group.sequence_logprobs.tolist() == pytest.approx([-0.25 * n for n in generator_lengths])


def test_a_completion_cut_at_the_length_limit_gets_no_end_of_sequence_token():
    (group,) = score(other_batch([["12", "ab"]], finish="length")).groups
    assert group.completions.token_ids.tolist() == [*OWN.encode("12"), *OWN.encode("ab")]


def test_a_text_holding_one_of_this_nodes_stop_strings_ends_there_without_an_end_token():
    # A node that ends its completions at a stop string (a base model that never writes its end token) would find
    # an appended end token nearly impossible: a peer's text that holds one of its stop strings ends as its own do.
    stopping = Retokenizer.for_node(OWN, chat=False, max_new_tokens=MAX_NEW_TOKENS, stop=["."])
    (group,) = score(other_batch([["3.", "7 or 8", "5..x"]]), stopping).groups
    first, second, third = np.split(group.completions.token_ids, np.cumsum(group.completions.lengths)[:-1])
    assert first.tolist() == OWN.encode("3.")  # ended by this node's stop string: no end token
    assert second.tolist() == [*OWN.encode("7 or 8"), OWN.eos_token_id]  # the generator's own end: this node's
    assert third.tolist() == OWN.encode("5.")  # cut where this node's own completion would have stopped
    assert group.rewards.tolist() == [1.0, 1.0, 1.0]  # scored on the texts as sent


@pytest.mark.parametrize("case", ["no texts", "no retokenizer", "unknown task", "held-out split", "too long",
                                  "empty"])
def test_groups_this_node_cannot_rebuild_are_unusable(case):
    long_text = "9" * (RETOKENIZED_PER_TOKEN * MAX_NEW_TOKENS)  # plus the end token: one over the bound
    batch = {
        "no texts": lambda: other_batch([["3", "x"]], with_texts=False),
        "no retokenizer": lambda: other_batch([["3", "x"]]),
        "unknown task": lambda: other_batch([["3", "x"]], dataset="gsm8k"),
        "held-out split": lambda: other_batch([["3", "x"]], split="test"),
        "too long": lambda: other_batch([["3", long_text]]),
        "empty": lambda: other_batch([["3", ""]], finish="length"),
    }[case]()
    if case == "no retokenizer":
        scored = score_batch(batch, TASK, OWN, trust_peer_answers=True, off_policy=True,
                             fingerprint=tokenizer_fingerprint(OWN), retokenizer=None)
    else:
        scored = score(batch, split="train")
    assert (scored.groups, scored.unusable) == ([], 1)


def test_a_text_over_the_character_bound_is_refused_before_it_is_tokenized():
    calls = []

    class Counting(type(OWN)):
        def __call__(self, text, *args, **kwargs):
            calls.append(len(text))
            return super().__call__(text, *args, **kwargs)

    counting = build_tokenizer()
    counting.__class__ = Counting
    retokenizer = Retokenizer.for_node(counting, chat=False, max_new_tokens=MAX_NEW_TOKENS)
    huge = "7" * (MAX_CHARACTERS_PER_TOKEN * retokenizer.max_tokens + 1)
    assert score(other_batch([["3", huge]]), retokenizer).unusable == 1
    assert calls == []  # no text of the group was tokenized
    assert score(other_batch([["3" * 30, "44", "555"]]), retokenizer).unusable == 1  # 31 tokens: over the bound,
    assert calls and set(calls) <= {1, 31}  # found on the first text (after its newline); the others never tokenized


def test_a_special_tokens_string_in_a_text_stays_characters_and_a_stop_gets_the_end_of_a_turn():
    (group,) = score(other_batch([["1<eos>2", "x"]])).groups
    first = group.completions.token_ids[: group.completions.lengths[0]].tolist()
    assert first == [*OWN.encode("1"), *OWN.encode("<"), *OWN.encode("eos"), *OWN.encode(">"), *OWN.encode("2"),
                     OWN.eos_token_id]  # the generator's text, not an end of sequence in the middle
    chat = build_tokenizer()  # a template whose assistant turns end with <pad>: the end a stop gets in chat mode
    chat.chat_template = "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}<pad>{% endfor %}"
    assert end_of_turn(chat, chat=True) == chat.pad_token_id and end_of_turn(chat, chat=False) == chat.eos_token_id
    assert end_of_turn(OWN, chat=True) == OWN.eos_token_id  # no template: the end of sequence


def test_a_text_is_tokenized_as_it_follows_a_prompt():
    """A sentencepiece tokenizer starts a string alone with a space: after a prompt it does not (Phi-3's
    "<think>" alone is "▁<" "th"...; after its prompt "<" "th"...). The text is tokenized after a newline."""

    class SpaceFirst(type(OWN)):  # the character tokenizer, with a space in front of a string that starts one
        def __call__(self, text, *args, **kwargs):
            out = super().__call__(text, *args, **kwargs)
            if not text.startswith("\n"):
                out["input_ids"] = [*super().__call__(" ", *args, **kwargs)["input_ids"], *out["input_ids"]]
            return out

    spacey = build_tokenizer()
    spacey.__class__ = SpaceFirst
    retokenizer = Retokenizer.for_node(spacey, chat=False, max_new_tokens=MAX_NEW_TOKENS)
    assert spacey("85")["input_ids"] == OWN.encode(" 85")
    assert retokenizer.tokens("85") == OWN.encode("85")  # no space: as the text follows a prompt
    assert Retokenizer.for_node(OWN, chat=False, max_new_tokens=MAX_NEW_TOKENS).tokens("85") == OWN.encode("85")


def test_the_bound_on_tokens_keeps_the_longest_honest_completion():
    text = "9" * (RETOKENIZED_PER_TOKEN * MAX_NEW_TOKENS - 1)  # with its end token: exactly the bound
    (group,) = score(other_batch([["3", text]])).groups
    assert int(group.completions.lengths.max()) == RETOKENIZED_PER_TOKEN * MAX_NEW_TOKENS


def test_groups_of_this_nodes_tokenizer_go_per_sequence_when_asked_and_keep_their_ids():
    own = other_batch([["3", "x"]], tokenizer=OWN)
    per_token, per_sequence = score(own), score(own, per_sequence=True)
    assert not per_token.per_sequence and not per_token.groups[0].per_sequence
    (group,) = per_sequence.groups
    assert per_sequence.per_sequence and group.per_sequence
    assert group.completions is own.groups[0].columns  # its own ids, as per token
    assert group.sequence_logprobs.tolist() == pytest.approx([-0.5 * 2, -0.5 * 2])  # one id and the end each


def model(vocab: int = len(OWN)) -> LlamaForCausalLM:
    torch.manual_seed(0)
    return LlamaForCausalLM(LlamaConfig(vocab_size=vocab, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                        num_attention_heads=2, num_key_value_heads=1))


def own_group(rewards: list[float], group_id: str = "me/0/0", key: str | None = None) -> TrainingGroup:
    (group,) = score(other_batch([["3", "x"]])).groups  # the rebuilt shape, then made this node's own
    rng = np.random.default_rng(len(group_id))
    lengths = np.array([2] * len(rewards))
    ids = rng.integers(8, len(OWN), int(lengths.sum()))
    columns = CompletionColumns(ids, np.full(len(ids), -1.0, np.float32), lengths, np.zeros(len(rewards)),
                                ("length",) * len(rewards))
    return TrainingGroup(group_id, "me", group.prompt_ids, columns, np.array(rewards), False, 1.0,
                         advantage_key=key)


def test_micro_batches_hold_one_form_and_a_mixed_advantage_group_goes_per_sequence_whole():
    (other,) = score(other_batch([["3", "x", "4"]])).groups
    mine = own_group([1.0, 0.0])
    shared = [own_group([1.0, 0.0], "me/0/1", key="p"), TrainingGroup(**{**other.__dict__, "advantage_key": "p"})]
    micro = micro_batches(advantage_groups([mine, other, *shared]), max_tokens=10_000)
    assert [(m.per_sequence, [g.group_id for g in m.groups]) for m in micro] == [
        (False, ["me/0/0"]), (True, ["bob/0/0", "me/0/1", "bob/0/0"])]
    step = Trainer(model(), "full", LossConfig(), TrainerConfig(learning_rate=1e-2)).step([mine, other, *shared])
    assert step.trained and step.sequence_groups == 3  # the other tokenizer's two, and the own one beside it


def test_a_step_on_both_forms_trains_and_counts_the_groups_per_sequence():
    (other,) = score(other_batch([["3", "x", "4", "y"]])).groups
    trainer = Trainer(model(), "full", LossConfig(), TrainerConfig(learning_rate=1e-2))
    before = [p.detach().clone() for p in trainer.parameters]
    step = trainer.step([own_group([1.0, 0.0]), other])
    assert step.trained and step.groups == 2 and step.sequence_groups == 1 and step.peer_groups == 1
    assert any(not torch.equal(a, b) for a, b in zip(before, trainer.parameters, strict=True))


@pytest.mark.parametrize("claim", [-1e30, -1e6, 0.0])
def test_a_lying_generator_log_prob_is_bounded_by_the_truncation_and_the_filter(claim):
    """A peer's summed log-prob is its claim: however absurd, the weight stays at most C and the step finite."""
    (other,) = score(other_batch([["3", "x", "4", "y"]])).groups
    lying = TrainingGroup(**{**other.__dict__, "sequence_logprobs": np.full(other.size, claim)})
    loss = LossConfig(variant="tis", clip_c=2.0)
    step = Trainer(model(), "full", loss, TrainerConfig(learning_rate=1e-2)).step([lying])
    assert step.trained and np.isfinite(step.loss) and np.isfinite(step.grad_norm)
    assert step.is_weight_max <= 2.0
    if claim == 0.0:  # π_gen(y) = 1 claimed: the weight exp((old - 0)/L) is below 1, and nothing is truncated
        assert step.truncated_fraction == 0
    else:  # an absurdly small π_gen(y): every completion's weight is truncated to C
        assert step.truncated_fraction == 1.0 and step.is_weight_max == pytest.approx(2.0)


def test_nodes_of_two_tokenizers_train_on_each_others_texts_per_sequence():
    """A character node and a BPE node on one in-memory hub: each uses the other's groups per sequence; a node
    that skips other tokenizers never receives them; a node that sends no texts is of no use to the BPE node."""
    hub = MemoryHub()
    char, bpe = make_node(hub, "char"), make_node(hub, "bpe", model="tiny-small-bpe")
    skipping = make_node(hub, "skip", swarm={"other_tokenizers": "skip"})
    quiet = make_node(hub, "quiet", swarm={"send_texts": False})
    assert char.policy.fingerprint != bpe.policy.fingerprint
    reports = {name: [] for name in ("char", "bpe", "skip", "quiet")}
    for _ in range(3):
        for name, node in (("char", char), ("bpe", bpe), ("skip", skipping), ("quiet", quiet)):
            reports[name].append(node.run_round())
    assert reports["bpe"][-1].peer_use == {"char": "sequence", "skip": "sequence", "quiet": "none"}
    assert reports["char"][-1].peer_use == {"bpe": "sequence", "skip": "token", "quiet": "token"}
    assert set(reports["skip"][-1].peer_use) == {"char", "quiet"}  # the BPE node's batches never delivered
    assert all(r.peer_groups_received for r in reports["char"][1:])  # the BPE node's groups, rebuilt here
    # The random BPE model writes a digit pair nearly every time (100 of its 247 tokens): its groups rarely have
    # reward variance under this task. The character model's do, and the BPE node trains on them per sequence.
    steps = [r.step for r in reports["bpe"] if r.step.sequence_groups]
    assert steps and all(s.trained and np.isfinite(s.loss) and s.is_weight_max <= 2.0 for s in steps)
    assert skipping.transport.stats().rejections.get(("bpe", "tokenizer"), 0) >= 1
