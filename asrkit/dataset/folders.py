"""Where asrkit keeps its data, finding an imported dataset by name, and reading its report.

A core module of its own, below both the import engine (which writes datasets) and training
(which reads them), so that neither has to import the other to know where datasets live.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from asrkit.core.errors import AsrkitError
from asrkit.core.storage import Location, StoragePath, location

#: Environment variable naming asrkit's home folder.
HOME_ENV = "ASRKIT_HOME"
#: The report every finished import writes last (its presence means the import is done).
DATASET_JSON = "dataset.json"
#: Default longest utterance an import keeps (``--max-duration``), in seconds: longer ones
#: rarely fit a GPU batch.
DEFAULT_MAX_SECONDS = 40.0
#: Largest recording an import reads (``--max-file-size``), in bytes: 4.6 hours of 16 kHz
#: 16-bit mono (TED-LIUM's SPHERE talks, the longest recordings of the corpora asrkit reads, are
#: under an hour), 48 minutes of 48 kHz 16-bit stereo WAV. A recording is held in memory whole
#: while it is converted, so a larger member (a ``tar --sparse`` archive of 10 kB can hold a
#: 1 GiB one) is skipped unread.
MAX_MEMBER_BYTES = 512 << 20


def asrkit_home() -> Path:
    """Where datasets and downloads live: ``$ASRKIT_HOME``, else ``~/.asrkit``."""
    return Path(os.environ.get(HOME_ENV) or Path.home() / ".asrkit")


def datasets_folder() -> Path:
    """The folder holding imported datasets by name: ``<home>/datasets``."""
    return asrkit_home() / "datasets"


def resolve_dataset(name: str | Location) -> Location:
    """A dataset given by folder, URL or name (``$ASRKIT_HOME/datasets/<name>``); a damaged
    ``dataset.json`` is an error, since it means the import did not end well."""
    given = location(name)
    if isinstance(given, StoragePath):
        url = given
        if not (url / DATASET_JSON).exists():
            raise AsrkitError(f"no imported dataset at {url} (no {DATASET_JSON}: never imported "
                              f"there, or its upload did not finish); import it with "
                              f"`asrkit import NAME --output {url}`")
        load_dataset_json(url)
        return url
    for candidate in (given, datasets_folder() / str(name)):
        if (candidate / DATASET_JSON).exists():
            load_dataset_json(candidate)
            return candidate
    raise AsrkitError(
        f"no imported dataset {name!r} (looked in ./{name} and {datasets_folder()}); "
        f"import it first, e.g. `asrkit import {name}`"
    )


def load_dataset_json(dataset: str | Location) -> dict[str, Any]:
    """A dataset's report; a damaged one (empty, cut short, edited by hand) is a one-line
    error that says to redo the import."""
    path = location(dataset) / DATASET_JSON
    if not path.exists():
        raise AsrkitError(f"{location(dataset)} is not an imported dataset (no {DATASET_JSON})")
    text = ""
    try:
        text = path.read_text(encoding="utf-8")
        report = json.loads(text)
        problem = "" if isinstance(report, dict) else "not a JSON object"
    except UnicodeDecodeError:
        problem = "not UTF-8 text"
    except json.JSONDecodeError as error:
        problem = "empty" if not text.strip() else f"not valid JSON: {error}"
    if problem:
        raise AsrkitError(f"{path} is damaged ({problem}); import the dataset again with --force")
    return report
