"""Which mount a folder lives on, read from ``/proc/self/mountinfo``: enough to tell, inside a container, that a
folder is an *anonymous* volume — the one Docker or podman makes for an image's ``VOLUME`` when ``docker run`` was
given no volume for it. Such a volume is named by 64 hex digits and is left behind with the container: a node
identity created there is lost at the next ``docker run`` (a new peer id, the reputation and the bootstrap address
others hold gone with it).
"""

import re
from pathlib import Path

MOUNTINFO = Path("/proc/self/mountinfo")
# The source of an anonymous volume as the container sees it: <engine's folder>/volumes/<64 hex digits>/_data
# (/var/lib/docker/volumes/..., /var/lib/containers/storage/volumes/..., or relative to a separate partition).
_ANONYMOUS = re.compile(r"(?:^|/)volumes/([0-9a-f]{64})/_data$")


def _unescape(field: str) -> str:
    """mountinfo writes space, tab, newline and backslash in paths as octal escapes (\\040 ...)."""
    return re.sub(r"\\([0-7]{3})", lambda match: chr(int(match.group(1), 8)), field)


def mount_of(folder: Path, mountinfo: str) -> tuple[str, str] | None:
    """The (source root, mount point) of the mount that holds ``folder``: the longest mount point above it."""
    best: tuple[str, str] | None = None
    path = str(folder)
    for line in mountinfo.splitlines():
        fields = line.split()
        if len(fields) < 5:
            continue
        root, point = _unescape(fields[3]), _unescape(fields[4])
        inside = path == point or point == "/" or path.startswith(point.rstrip("/") + "/")
        if inside and (best is None or len(point) >= len(best[1])):
            best = (root, point)
    return best


def anonymous_volume(folder: Path, mountinfo: str | None = None) -> str | None:
    """The mount point of the anonymous volume that holds ``folder``, or None (a named volume, a bind mount, no
    container, or no mountinfo to read)."""
    if mountinfo is None:
        try:
            mountinfo = MOUNTINFO.read_text()
        except OSError:
            return None
    found = mount_of(Path(folder).absolute(), mountinfo)
    if found is None or not _ANONYMOUS.search(found[0]):
        return None
    return found[1]
