"""Reproducers of the node fuzzer's escapes: a round's cases saved, bisected to the fewest that still raise the same
way, and replayed.

    python -m benchmarks.fuzz_node --replay runs/fuzz-node/escape-1/minimal

A saved escape is a folder: ``escape.txt`` (profile, round, error, the traceback's last frames) and ``cases/``, each
case as ``<i>.json`` (its fields) and ``<i>.bin`` (its payload). ``replay`` builds a fresh node of the profile
whose clock reads the cases' own time (their dates are in their bytes, so an old reproducer is not merely stale),
publishes them, and runs a hostile round and the honest round after it, as the fuzzer does.
"""

import json
import random
import time
from pathlib import Path

from benchmarks.fuzzing.node import Finding, FuzzNode
from benchmarks.fuzzing.peers import Case


def save_cases(folder: Path, cases: list[Case]) -> None:
    cases_folder = folder / "cases"
    cases_folder.mkdir(parents=True, exist_ok=True)
    for i, case in enumerate(cases):
        changes = {key: {"hex": value.hex()} if isinstance(value, bytes) else value
                   for key, value in case.changes.items()}
        fields = {"kind": case.kind, "peer_id": case.peer_id, "round": case.round, "tokenizer": case.tokenizer,
                  "created_at": case.created_at, "changes": changes}
        (cases_folder / f"{i}.json").write_text(json.dumps(fields, ensure_ascii=False) + "\n")
        (cases_folder / f"{i}.bin").write_bytes(case.payload)


def load_cases(folder: Path) -> list[Case]:
    cases = []
    for meta in sorted((folder / "cases").glob("*.json"), key=lambda path: int(path.stem)):
        fields = json.loads(meta.read_text())
        changes = {key: bytes.fromhex(value["hex"]) if isinstance(value, dict) else value
                   for key, value in fields.pop("changes").items()}
        cases.append(Case(payload=meta.with_suffix(".bin").read_bytes(), changes=changes, **fields))
    return cases


def save_finding(out: Path, number: int, finding: Finding) -> Path:
    folder = out / f"{finding.what}-{number}"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "finding.txt").write_text(f"profile: {finding.profile}\nround: {finding.phase}\n"
                                        f"error: {finding.error}\nsignature: {finding.signature}\n\n"
                                        + "".join(finding.frames))
    save_cases(folder, finding.cases)
    return folder


def replay(profile: str, cases: list[Case], seed: int = 0) -> list[Finding]:
    """What a fresh node of ``profile`` given ``cases`` in one round, then an honest round, found (the rounds stop
    at an escape)."""
    now = time.time()
    made = [case.created_at for case in cases if case.created_at <= now] or [now]
    lag = now - max(made)  # the node's clock reads the newest case's time (plus the seconds since)
    fuzz = FuzzNode(profile, clock=lambda: time.time() - lag)
    try:
        fuzz.publish(cases)
        findings = fuzz.run_round("hostile", cases).findings
        if not any(finding.what == "escape" for finding in findings):
            fuzz.publish_honest(random.Random(seed))
            findings += fuzz.run_round("honest", cases).findings
        return findings
    finally:
        fuzz.close()


def reduce(finding: Finding, folder: Path) -> Path:
    """Bisect ``finding``'s cases on fresh nodes while a half alone still breaks the property the same way; the
    smallest set found is saved under ``folder/minimal``."""
    cases = finding.cases
    named = [case for case in cases if case.peer_id in finding.culprits]  # a pass names whose groups it held
    if named and any(found.signature == finding.signature for found in replay(finding.profile, named)):
        cases = named
    while len(cases) > 1:
        half = len(cases) // 2
        for part in (cases[:half], cases[half:]):
            if any(found.signature == finding.signature for found in replay(finding.profile, part)):
                cases = part
                break
        else:
            break
    minimal = folder / "minimal"
    save_cases(minimal, cases)
    (minimal / "finding.txt").write_text(f"profile: {finding.profile}\nsignature: {finding.signature}\n"
                                         f"kinds: {', '.join(case.kind for case in cases)}\n")
    return minimal


def profile_of(folder: Path) -> str:
    """The profile a saved finding (or its ``minimal``) was found on."""
    for path in (folder / "finding.txt", folder.parent / "finding.txt"):
        if path.exists():
            for line in path.read_text().splitlines():
                if line.startswith("profile: "):
                    return line.removeprefix("profile: ")
    return "async"
