"""When a running node checkpoints and exports its model, and how it resumes (``[checkpoint]`` settings).

    checkpointer = Checkpointer(node, out, echo)
    checkpointer.start(resume=True)  # continue from <out>/checkpoints/; without resume, refuse to mix two runs there
    ...                        # after each round: checkpointer.after_round()
    checkpointer.stop()              # in a finally: checkpoint the last completed round, export the model

A checkpoint goes into ``<out>/checkpoints/`` (``checkpoint_files.py``) every ``every_rounds`` rounds and when the
node stops (Ctrl-C, SIGTERM, ``--rounds`` reached, or an error); the Hugging Face export into ``<out>/export/``
at each checkpoint when ``export_on_checkpoint`` and always when the node stops. Only a round that completed
is saved: a node stopped inside its optimizer step keeps its previous checkpoint and says so.
"""

from collections.abc import Callable
from pathlib import Path

from ftis.node.models import export_policy
from ftis.node.runner.checkpoint_files import (
    CheckpointError,
    config_changes,
    list_checkpoints,
    resume_latest,
    save_checkpoint,
)
from ftis.node.runner.node import Node, RoundInterrupted

CHECKPOINTS, EXPORT = "checkpoints", "export"  # inside the node's folder


class CheckpointsExistError(CheckpointError):
    """A new run was started in a folder that holds another run's checkpoints."""


class Checkpointer:
    def __init__(self, node: Node, out: Path, echo: Callable[[str], None]):
        self.node, self.echo, self.config = node, echo, node.config.checkpoint
        self.folder, self.export_folder = out / CHECKPOINTS, out / EXPORT
        self._saved = self._exported = node.round  # rounds completed when last saved / exported

    def start(self, resume: bool) -> None:
        """Resume from the newest valid checkpoint, or (a new run) make sure there is none to overwrite."""
        if not resume:
            if list_checkpoints(self.folder):
                raise CheckpointsExistError(f"{self.folder} holds checkpoints of an earlier run: pass --resume to "
                                            "continue it, or give this node another --out folder")
            return
        resumed = resume_latest(self.node, self.folder)
        for skipped in resumed.skipped:
            self.echo(f"skipped a damaged checkpoint: {skipped.reason}")
        checkpoint = resumed.checkpoint
        self.echo(f"resumed from {checkpoint.path}: round {checkpoint.round}, policy v{checkpoint.policy_version}")
        changed = config_changes(checkpoint.config, self.node.config.model_dump(mode="json"))
        if changed:
            self.echo(f"settings that differ from the checkpoint's: {', '.join(changed)}")
        self._saved = self._exported = self.node.round

    def after_round(self) -> None:
        every = self.config.every_rounds
        if every and self.node.round - self._saved >= every:
            self._persist(export=self.config.export_on_checkpoint)

    def stop(self) -> None:
        """Checkpoint and export the last completed round unless that is done already."""
        try:
            self._persist(export=True)
        except RoundInterrupted as error:
            self.echo(f"not checkpointed: {error}; the last checkpoint stands")

    def _persist(self, export: bool) -> None:
        state = self.node.state_dict()  # RoundInterrupted inside an optimizer step
        version, done = state.trainer["policy_version"], []
        if state.round != self._saved:
            done.append(f"checkpoint {save_checkpoint(self.node, self.folder, self.config.keep_last)}")
            self._saved = state.round
        if export and state.round != self._exported:
            try:
                done.append(f"export {export_policy(self.node.policy, self.export_folder, policy_version=version)}")
            except OSError as error:
                raise CheckpointError(f"cannot export the model to {self.export_folder}: {error}") from error
            self._exported = state.round
        if done:
            self.echo(f"before round {state.round} (policy v{version}): {'; '.join(done)}")
