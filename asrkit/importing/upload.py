"""An imported dataset copied to object storage (``asrkit import NAME --output gs://...``).

The import itself runs in a local staging folder (``$ASRKIT_HOME/staging/<name>-<digest of
the URL>``), where it converts, shards and resumes exactly as a local import does; its finished
files are then uploaded (:func:`asrkit.core.files.upload_folder`). Two rules make a killed
upload harmless:

- an object under its final name is whole: an object store shows one only once its upload
  completes, and elsewhere (``file://``, HDFS) each is written as ``NAME.partial`` and renamed
  into place (:func:`asrkit.core.files.copy_file`); a rerun skips those whose size matches the
  staged file's;
- ``dataset.json`` goes last: a dataset at a URL without it is an unfinished upload, which
  training refuses (``resolve_dataset``) and a rerun of the import completes.

The staging folder's ``.import`` work state stays local; it is what lets a rerun continue.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from asrkit.core.files import upload_folder
from asrkit.core.storage import StoragePath
from asrkit.dataset.folders import DATASET_JSON
from asrkit.importing.outputs import DATASET, holds_ours

#: What stays in the staging folder: the import's resumable work state.
LOCAL_ONLY = (".import",)


def staging_folder(home: Path, url: StoragePath) -> Path:
    """The local folder an import to ``url`` runs in: one per URL, so that a rerun finds its
    work and two URLs never share it."""
    digest = hashlib.sha1(str(url).encode()).hexdigest()[:12]
    return home / "staging" / f"{url.name}-{digest}"


def check_target(url: StoragePath, force: bool) -> None:
    """Refuse to write into a URL folder asrkit did not make; with ``--force``, empty one it
    made (a dataset), to upload anew."""
    if holds_ours(url, DATASET) and force:
        url.rmtree()


def upload(staging: Path, url: StoragePath, progress: bool = True) -> int:
    """Copy the staged dataset to ``url``; return how many files were copied (none when the
    same import is there whole already)."""
    finished = url / DATASET_JSON
    if finished.exists():
        if finished.read_bytes() == (staging / DATASET_JSON).read_bytes():
            return 0
        finished.unlink()  # another import's: no longer finished until this one is
    return upload_folder(staging, url, last=DATASET_JSON, exclude=LOCAL_ONLY,
                         progress=progress)
