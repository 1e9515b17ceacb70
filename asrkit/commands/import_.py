"""The ``asrkit import <name>`` commands: the options every importer shares, plus its own.

Kept apart from the engine (:mod:`asrkit.importing.engine`) so that building the command line
imports nothing heavy: the engine is loaded when an import actually runs. The engine never
imports this module: the defaults both need live in :mod:`asrkit.dataset.folders`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from asrkit.commands.options import FiniteFloat, LocationType
from asrkit.core.storage import StoragePath
from asrkit.dataset.folders import DATASET_JSON, DEFAULT_MAX_SECONDS, MAX_MEMBER_BYTES
from asrkit.types import Importer

if TYPE_CHECKING:
    from collections.abc import Iterator

    from asrkit.importing.engine import ImportConfig, ImportResult



def summary(result: ImportResult) -> str:
    report = result.report
    if not result.did_work:
        return (f"{report['name']} is already imported at {result.dataset}: nothing to do "
                "(--force redoes it)")
    parts = [f"{split} {info['utterances']} utt / {info['hours']:.2f} h"
             for split, info in report["splits"].items()]
    skipped = Counter({reason: info["count"] for reason, info in report["skipped"].items()})
    line = f"imported {report['name']} into {result.dataset}: " + ", ".join(parts or ["nothing"])
    if skipped:
        line += "; skipped " + ", ".join(f"{n} {reason}" for reason, n in skipped.most_common())
        line += f" (listed in {DATASET_JSON})"
    return line


COMMON_PARAMS = {"output", "mirror", "archive", "no_verify", "jobs", "force", "max_duration",
                 "max_file_size", "alphabet", "no_progress", "as_json"}

#: The most ``--max-file-size`` allows, in MiB: a recording is held in memory while converted.
MAX_FILE_MIB = 1 << 16


def import_command(importer: Importer) -> click.Command:
    """``asrkit import <importer.name>``: the shared options plus the importer's own."""

    def callback(**params: Any) -> None:
        from asrkit.core.text import Alphabet
        from asrkit.importing.engine import ImportConfig, run_import
        from asrkit.plugins import get_plugins

        alphabet = Alphabet.load(params["alphabet"]) if params["alphabet"] else Alphabet()
        config = ImportConfig(
            output=params["output"],
            mirror=params["mirror"] or os.environ.get("ASRKIT_MIRROR") or None,
            archives=tuple(params["archive"]),
            verify=not params["no_verify"],
            jobs=params["jobs"] or (os.cpu_count() or 1),
            force=params["force"],
            max_seconds=params["max_duration"],
            max_member_bytes=params["max_file_size"] << 20,
            alphabet=alphabet,
            progress=not params["no_progress"],
        )
        options = {k: v for k, v in params.items() if k not in COMMON_PARAMS}
        registration = get_plugins().registry.entries["importer"].get(importer.name)
        provider = registration.provider.distribution if registration else ""
        from asrkit.core.locks import folder_lock
        from asrkit.dataset.folders import load_dataset_json

        url = params["output"] if isinstance(params["output"], StoragePath) else None
        if url is not None:  # imported in a local staging folder, then uploaded
            from asrkit.importing.upload import check_target, staging_folder, upload

            config = dataclasses.replace(config, output=staging_folder(config.home, url))
        dataset = config.output or config.home / "datasets" / importer.dataset_name(options)
        # One import at a time into a dataset folder; a lock that cannot be made (ASRKIT_HOME a
        # file, read-only) is the import's own write error, said the same way.
        with contextlib.ExitStack() as held:
            if url is not None:
                held.enter_context(folder_lock(url, "import"))
                check_target(url, config.force)  # under the lock: --force empties the folder
            held.enter_context(_disk_errors_named(dataset, config))
            held.enter_context(folder_lock(dataset, "import"))
            if not config.force and (dataset / DATASET_JSON).exists():
                load_dataset_json(dataset)  # a damaged one is a one-line error
            result = run_import(importer, options, config, provider)
            if url is not None:
                copied = upload(dataset, url, progress=config.progress)
                result = dataclasses.replace(result, dataset=url,
                                             did_work=result.did_work or copied > 0)
        if params["as_json"]:
            click.echo(json.dumps({"dataset": str(result.dataset), "did_work": result.did_work,
                                   **result.report}, indent=2))
        else:
            click.echo(summary(result))

    params: list[click.Parameter] = [
        *importer.options(),
        click.Option(["--output", "-o"], type=LocationType(), default=None,
                     help="Dataset folder, or a URL (gs://bucket/folder) to upload it to "
                          "[default: $ASRKIT_HOME/datasets/NAME]."),
        click.Option(["--mirror"], metavar="URL", default=None,
                     help="Download from this host instead (keeps the path); its SHA256SUMS "
                          "file, if any, gives the checksums. [env: ASRKIT_MIRROR]"),
        click.Option(["--archive"], type=click.Path(exists=True, path_type=Path), multiple=True,
                     help="Use this archive (or folder) on disk instead of downloading; "
                          "repeat for several."),
        click.Option(["--no-verify"], is_flag=True,
                     help="Import even when a file's size or sha256 does not match."),
        click.Option(["--jobs", "-j"], type=click.IntRange(min=1), default=None,
                     help="Conversion worker processes [default: all cores]."),
        click.Option(["--force"], is_flag=True,
                     help="Redo the import from scratch (replaces only a dataset folder "
                          "asrkit made)."),
        click.Option(["--max-duration"], type=FiniteFloat(min=0.1),
                     default=DEFAULT_MAX_SECONDS, show_default=True,
                     help="Skip utterances longer than this many seconds."),
        click.Option(["--max-file-size"], type=click.IntRange(min=1, max=MAX_FILE_MIB),
                     default=MAX_MEMBER_BYTES >> 20, show_default=True, metavar="MIB",
                     help="Skip (and name) recordings larger than this many MiB, unread: each "
                          "is held in memory while it is converted."),
        click.Option(["--alphabet"], type=click.Path(exists=True, dir_okay=False),
                     default=None, help="Alphabet file [default: English a-z, space, ']."),
        click.Option(["--no-progress"], is_flag=True, help="No progress bars."),
        click.Option(["--json", "as_json"], is_flag=True,
                     help="Print the dataset report as JSON."),
    ]
    doc = importer.description
    details = [f"Homepage: {importer.homepage}" if importer.homepage else "",
               f"Licence: {importer.license}" if importer.license else ""]
    help_text = doc + "\n\n" + "\n\n".join(d for d in details if d)
    return click.Command(importer.name, callback=callback, params=params, help=help_text,
                         short_help=doc.split("\n")[0][:80],
                         context_settings={"max_content_width": 100})


@contextlib.contextmanager
def _disk_errors_named(dataset: Path, config: ImportConfig) -> Iterator[None]:
    from asrkit.importing.engine import disk_error

    try:
        yield
    except OSError as error:
        named = disk_error(error, dataset, config)
        if named is None:
            raise
        raise named from None
