"""``asrkit export --force`` never leaves the user without an export: whatever stops a
replacement, a whole export (the old or the new) is on disk, and the next export finishes what a
crash left. The model work is faked (an "export" is one file saying which it is), so that only
the replacement runs; failures are injected between its steps."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

from asrkit.importing import outputs
from asrkit.serving import export
from asrkit.serving.export import ExportError, export_run


class Crash(BaseException):
    """The process dying at this point: nothing after it runs, no handler cleans up (only
    ``finally`` blocks, which a real crash would not run either; none of them undoes a
    rename)."""


@pytest.fixture
def exports(monkeypatch, tmp_path):
    """``write(label, force=...)`` exports a fake run to ``target``: its ``saved_model.pb``
    holds ``label``."""
    run_folder = tmp_path / "run"
    run_folder.mkdir()
    target = tmp_path / "exported"
    label = {"text": ""}
    monkeypatch.setattr(export, "load_networks",
                        lambda folder, fmt, checkpoint, chunk_ms=None:
                        (SimpleNamespace(labels=None), None, None, {}))
    monkeypatch.setattr(export, "serving_module", lambda run, model, with_text=True: None)
    monkeypatch.setattr(export, "_save", lambda module, folder:
                        (folder / "saved_model.pb").write_text(label["text"]))
    monkeypatch.setattr(export, "_metadata",
                        lambda run, fmt, checkpoint, state, head=None: {"format": fmt})
    monkeypatch.setattr(export, "joins_symbols", lambda labels: False)
    monkeypatch.setattr(export, "verify_export", lambda folder, module: 0.0)

    def write(text: str, force: bool = True) -> dict:
        label["text"] = text
        return export_run(run_folder, "savedmodel", target, force=force)

    return SimpleNamespace(write=write, target=target, parent=tmp_path)


def holding(parent: Path, text: str) -> list[str]:
    """The folders under ``parent`` (hidden ones too) holding a whole export labelled ``text``."""
    return sorted(p.name for p in parent.iterdir()
                  if (p / "saved_model.pb").is_file() and (p / "asrkit.json").is_file()
                  and (p / "saved_model.pb").read_text() == text)


def leftovers(exports) -> list[str]:
    """Hidden folders beside the export: staging or an export set aside."""
    return sorted(p.name for p in exports.parent.iterdir()
                  if p.name.startswith(f".{exports.target.name}."))


def fail_on_call(monkeypatch, target, name: str, fails, error: BaseException):
    """Make ``target.name`` raise ``error`` from the first call for which ``fails(*args)`` is
    true; with a :class:`Crash`, on every call after it too (a dead process does nothing
    more). Return the function that puts the real one back."""
    real = getattr(target, name)
    crashed = {"yes": False}

    def patched(*args, **kwargs):
        if crashed["yes"] or fails(*args):
            crashed["yes"] = isinstance(error, Crash)
            raise error
        return real(*args, **kwargs)

    monkeypatch.setattr(target, name, patched)
    return lambda: monkeypatch.setattr(target, name, real)


def into_place(exports):
    """Whether a rename is the new export's, from its staging folder into place."""
    return lambda source, destination: (Path(destination) == exports.target
                                        and "old-export" not in Path(source).name)


def test_a_failed_rename_into_place_keeps_the_old_export(exports, monkeypatch):
    exports.write("old")
    fail_on_call(monkeypatch, os, "replace", into_place(exports),
                 OSError(5, "Input/output error"))
    with pytest.raises(OSError):
        exports.write("new")
    assert holding(exports.parent, "old") == ["exported"]
    assert leftovers(exports) == []


def test_a_crash_before_the_rename_into_place_is_undone_by_the_next_export(exports,
                                                                           monkeypatch):
    exports.write("old")
    restore = fail_on_call(monkeypatch, os, "replace", into_place(exports), Crash())
    with pytest.raises(Crash):
        exports.write("new")
    restore()
    assert holding(exports.parent, "old"), "the old export is gone"  # set aside, whole

    with pytest.raises(ExportError, match="already exists; pass --force"):
        exports.write("newer", force=False)  # the old export is back in place first
    assert holding(exports.parent, "old") == ["exported"] and leftovers(exports) == []
    exports.write("newer")
    assert holding(exports.parent, "newer") == ["exported"] and leftovers(exports) == []


def test_a_crash_before_the_old_export_is_deleted_is_cleaned_up(exports, monkeypatch):
    exports.write("old")
    # the first deletion of a whole export is the old one's
    restore = fail_on_call(monkeypatch, shutil, "rmtree",
                           lambda path, *_: (Path(path) / "saved_model.pb").is_file(), Crash())
    with pytest.raises(Crash):
        exports.write("new")
    restore()
    assert holding(exports.parent, "new") == ["exported"]  # the new one is whole, in place
    assert holding(exports.parent, "old"), "the old export is gone"  # not yet deleted

    exports.write("newer")
    assert holding(exports.parent, "newer") == ["exported"] and leftovers(exports) == []


def test_the_old_export_is_deleted_only_after_the_renames_are_on_disk(exports, monkeypatch):
    exports.write("old")
    events: list[tuple[str, str]] = []
    real_replace, real_sync, real_rmtree = os.replace, export.sync_to_disk, shutil.rmtree

    def replace(source, destination):
        events.append(("rename", f"{Path(source).name} -> {Path(destination).name}"))
        real_replace(source, destination)

    def sync(path):
        if Path(path) == exports.parent:
            events.append(("sync", Path(path).name))
        real_sync(path)

    def rmtree(path, *args, **kwargs):
        if Path(path).exists():
            events.append(("delete", Path(path).name))
        real_rmtree(path, *args, **kwargs)

    monkeypatch.setattr(os, "replace", replace)
    monkeypatch.setattr(export, "sync_to_disk", sync)
    monkeypatch.setattr(shutil, "rmtree", rmtree)
    exports.write("new")
    aside = export.aside_path(exports.target).name
    assert [kind for kind, _ in events] == ["rename", "rename", "sync", "delete"]
    assert events[0][1] == f"exported -> {aside}" and events[1][1].endswith("-> exported")
    assert events[3] == ("delete", aside)


def test_an_aside_folder_with_foreign_files_is_not_deleted(exports):
    exports.write("old")
    aside = export.aside_path(exports.target)
    aside.mkdir()
    (aside / "notes.txt").write_text("mine\n")
    with pytest.raises(ExportError, match="asrkit did not write"):
        exports.write("new")
    assert (aside / "notes.txt").read_text() == "mine\n"
    assert holding(exports.parent, "old") == ["exported"]


@pytest.mark.parametrize("made", ["model.onnx", "model.tflite", "saved_model.pb",
                                  "tokens.txt",  # with model.onnx: a sherpa-onnx export
                                  "encoder.onnx", "decoder.onnx", "joiner.onnx"])
def test_every_format_asrkit_exports_may_be_replaced(tmp_path, made):
    """``--force`` replaces an export of any format asrkit writes (an ONNX export was taken
    for foreign files), and still refuses a file it does not write."""
    folder = tmp_path / "export"
    folder.mkdir()
    outputs.mark(folder, outputs.EXPORT)
    for name in (made, "asrkit.json", "alphabet.txt"):
        (folder / name).write_text("x")
    outputs.check_replaceable(folder, outputs.EXPORT)
    (folder / "notes.txt").write_text("mine")
    with pytest.raises(outputs.OutputError, match=r"notes\.txt"):
        outputs.check_replaceable(folder, outputs.EXPORT)
