"""The folders a node writes, checked before it starts: its node folder (``--out``) and the folder of a new
identity file, which must also outlive the container (not an anonymous volume). A folder it cannot write (a bind
mount the container's user does not own, a read-only volume) would otherwise surface after the warm start and the
swarm's start-up, minutes in; here it is said at once, with the fix, and nothing is written but the folders a
writable parent lets it create.
"""

import contextlib
import os
import tempfile
from pathlib import Path

from ftis.node.errors import UserError
from ftis.node.swarm.keys.identity import check_identity_kept


class FolderError(UserError, OSError):
    """A folder the node must write cannot be written; the message says which and how to fix it."""


def check_writable(folder: Path, what: str) -> None:
    """Create ``folder`` (and its parents) if missing, then create and remove a file in it."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        handle, probe = tempfile.mkstemp(prefix=".write-check-", dir=folder)
        os.close(handle)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(probe)
    except OSError as error:
        owner = f"{os.getuid()}:{os.getgid()}" if hasattr(os, "getuid") else None
        fix = (f"; it must be writable by uid {os.getuid()} (a bind mount: chown -R {owner} the host folder, or "
               "choose another)") if owner else ""
        raise FolderError(f"cannot write {what} {folder.absolute()}: {error.strerror or error}{fix}") from None


def check_node_folders(out: Path, identity: Path | None) -> None:
    """The node folder, and the folder of an identity file that does not exist yet (one that exists is read)."""
    new_identity = identity if identity is not None and not identity.exists() else None
    if new_identity is not None:
        check_identity_kept(new_identity)  # reads only: before any folder is made
    check_writable(out, "the node folder")
    if new_identity is not None:
        check_writable(new_identity.parent, "the identity file's folder")
