"""Building real archives in memory for tests: tar.gz with deterministic headers."""

from __future__ import annotations

import io
import tarfile
import wave
from pathlib import Path


def tar_gz(files: dict[str, bytes], links: dict[str, str] | None = None,
           hardlinks: dict[str, str] | None = None) -> bytes:
    """A .tar.gz of ``files`` (member name -> content) plus symbolic and hard links (name ->
    target), with fixed timestamps so the same input gives the same bytes."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz", format=tarfile.PAX_FORMAT) as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mtime, info.mode = len(data), 0, 0o644
            tar.addfile(info, io.BytesIO(data))
        for kind, table in ((tarfile.SYMTYPE, links or {}), (tarfile.LNKTYPE, hardlinks or {})):
            for name, target in table.items():
                info = tarfile.TarInfo(name)
                info.type, info.linkname, info.mtime = kind, target, 0
                tar.addfile(info)
    return buffer.getvalue()


def wav_seconds(path: Path) -> float:
    with wave.open(str(path), "rb") as w:
        return w.getnframes() / w.getframerate()
