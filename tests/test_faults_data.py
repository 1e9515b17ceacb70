"""Hostile and broken inputs to ``asrkit import``: nothing of the user's is ever deleted, and
every bad input ends in one line (or one entry of ``dataset.json``), never a traceback, a hang
or a lost import. Real folders, links, FIFOs, archives, processes and filesystems (a tmpfs where
mounting is allowed); a disk-full error is injected only for the variant without a mount."""

from __future__ import annotations

import contextlib
import errno
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from asrkit.core.text import decode_text, quote
from asrkit.testing import CliResult
from tests import corpora, toy_importer
from tests.archives import tar_gz
from tests.conftest import FAULTS, SPEECH, run_asrkit

CLIPS = corpora.speechbrain_clips()
LJ = SPEECH / "ljspeech" / "LJ002-0020.wav"


def one_line_error(result) -> str:
    """The error line of a failed command, checked to be the only thing it said."""
    assert result.exit_code == 1, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.strip().splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("asrkit: error: "), result.stderr
    return lines[0]


def recording(folder: Path, name: str, clip: str = "spk1_snt1", text: str | None = None) -> None:
    """``folder/name.wav`` (a real clip) with its transcript beside it."""
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(CLIPS[clip].path, folder / f"{name}.wav")
    (folder / f"{name}.txt").write_text(text if text is not None else CLIPS[clip].transcript)


def report_of(dataset: Path) -> dict:
    return json.loads((dataset / "dataset.json").read_text())


def snapshot(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes()
            for p in sorted(folder.rglob("*")) if p.is_file() and not p.is_symlink()}


# -- --force and output folders ------------------------------------------------------------------


@pytest.fixture
def rec(tmp_path: Path) -> Path:
    root = tmp_path / "rec"
    recording(root, "a", "spk1_snt1")
    recording(root, "b", "spk1_snt2")
    return root


def test_force_refuses_a_folder_holding_the_users_files(asrkit_cli, asrkit_home, rec, tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    (work / "thesis.tex").write_text("three years of work\n")
    (work / "notes").mkdir()
    (work / "notes" / "n.txt").write_text("more\n")
    before = snapshot(work)
    for extra in ([], ["--force"]):
        line = one_line_error(asrkit_cli(corpora.import_args("folder", rec, "-o", work, *extra)))
        assert str(work) in line
        assert ("not made by asrkit" if extra else "asrkit did not write") in line
        assert snapshot(work) == before


def test_force_refuses_the_current_folder(asrkit_cli, asrkit_home, rec, tmp_path, monkeypatch):
    project = tmp_path / "project"
    assert asrkit_cli(corpora.import_args("folder", rec, "-o", project)).exit_code == 0
    before = snapshot(project)
    monkeypatch.chdir(project)
    line = one_line_error(asrkit_cli(corpora.import_args("folder", rec, "-o", ".", "--force")))
    assert "current folder" in line
    assert snapshot(project) == before


def test_force_refuses_a_folder_holding_the_input(asrkit_cli, asrkit_home, tmp_path):
    work = tmp_path / "work"
    recording(work / "rec", "a")
    # A dataset made by asrkit into work/, with the recordings inside it.
    assert asrkit_cli(corpora.import_args("folder", work / "rec", "-o", work / "ds")).exit_code == 0
    shutil.move(work / "rec", work / "ds" / "rec")
    before = snapshot(work)
    line = one_line_error(asrkit_cli(corpora.import_args("folder", work / "ds" / "rec", "-o",
                                                         work / "ds", "--force")))
    assert "holds the corpus this import reads" in line
    assert snapshot(work) == before


def test_force_replaces_only_what_asrkit_made(asrkit_cli, asrkit_home, rec):
    dataset = asrkit_home / "datasets" / "rec"
    assert asrkit_cli(corpora.import_args("folder", rec)).exit_code == 0
    assert (dataset / ".asrkit-output").is_file()
    again = asrkit_cli(corpora.import_args("folder", rec, "--force"))
    assert again.exit_code == 0, again.stderr
    assert report_of(dataset)["total"]["utterances"] == 2
    (dataset / "my-notes.md").write_text("mine\n")  # the user keeps a note in the dataset
    line = one_line_error(asrkit_cli(corpora.import_args("folder", rec, "--force")))
    assert "my-notes.md" in line
    assert (dataset / "my-notes.md").read_text() == "mine\n"
    assert (dataset / "dataset.json").exists()


def test_force_adopts_a_dataset_made_before_the_marker(asrkit_cli, asrkit_home, rec):
    dataset = asrkit_home / "datasets" / "rec"
    assert asrkit_cli(corpora.import_args("folder", rec)).exit_code == 0
    (dataset / ".asrkit-output").unlink()  # as an older asrkit left it
    again = asrkit_cli(corpora.import_args("folder", rec, "--force"))
    assert again.exit_code == 0, again.stderr
    assert (dataset / ".asrkit-output").is_file()


# -- the folder walker --------------------------------------------------------------------------


def test_a_link_loop_imports_each_recording_once(asrkit_cli, asrkit_home, tmp_path):
    root = tmp_path / "looped"
    recording(root, "a")
    (root / "loop").symlink_to(".")
    (root / "sub").mkdir()
    (root / "sub" / "up").symlink_to("..")
    result = asrkit_cli(corpora.import_args("folder", root))
    assert result.exit_code == 0, result.stderr
    report = report_of(asrkit_home / "datasets" / "looped")
    assert report["total"]["utterances"] == 1
    assert report["skipped"]["link loop"]["files"] == ["loop", "sub/up"]


def test_links_never_leave_the_corpus_folder(asrkit_cli, asrkit_home, tmp_path, make_plugins):
    secret = tmp_path / "elsewhere"
    recording(secret, "private", "spk2_snt1")
    root = tmp_path / "corpus"
    recording(root, "a")
    (root / "private.wav").symlink_to(secret / "private.wav")
    (root / "private.txt").symlink_to(secret / "private.txt")
    (root / "inside").symlink_to("a.wav")  # a link inside the folder is fine (not audio here)
    result = asrkit_cli(corpora.import_args("folder", root))
    assert result.exit_code == 0, result.stderr
    report = report_of(asrkit_home / "datasets" / "corpus")
    assert report["total"]["utterances"] == 1
    assert report["skipped"]["link leaves the folder"]["files"] == ["private.txt",
                                                                   "private.wav"]

    # The same inside an extracted archive passed as --archive FOLDER.
    toy = make_plugins(toy_importer)
    extracted = tmp_path / "extracted"
    (extracted / "toy").mkdir(parents=True)
    shutil.copyfile(CLIPS["spk1_snt1"].path, extracted / "toy" / "a.wav")
    (extracted / "toy" / "b.wav").symlink_to(secret / "private.wav")
    (extracted / "toy" / "transcripts.tsv").write_text(
        "a.wav\ttrain\tthe child almost hurt the small dog\nb.wav\ttrain\twe are sure\n")
    result = asrkit_cli(["import", "toy", "--archive", extracted, "--no-progress"], toy)
    assert result.exit_code == 0, result.stderr
    report = report_of(asrkit_home / "datasets" / "toy")
    assert report["splits"]["train"]["utterances"] == 1
    assert report["skipped"]["audio file missing"]["utterances"] == ["train/b"]
    assert report["skipped"]["link leaves the folder"]["files"] == ["toy/b.wav"]


def test_a_file_name_that_is_not_utf8_is_skipped_and_named(asrkit_cli, asrkit_home, tmp_path):
    """``caf\\xe9.wav`` (Latin-1 bytes, as an old archive or another system left it) is listed
    as skipped with its bytes escaped; the other recordings import, and so do reruns."""
    root = tmp_path / "odd"
    recording(root, "a")
    recording(root / "sub", "b", "spk2_snt1")
    odd = os.fsencode(root) + b"/caf\xe9"
    shutil.copyfile(CLIPS["spk1_snt1"].path, odd + b".wav")
    Path(os.fsdecode(odd + b".txt")).write_text(CLIPS["spk1_snt1"].transcript)
    os.mkdir(os.fsencode(root) + b"/d\xe9j\xe0")
    shutil.copyfile(CLIPS["spk1_snt1"].path, os.fsencode(root) + b"/d\xe9j\xe0/c.wav")
    for _ in range(2):
        result = asrkit_cli(corpora.import_args("folder", root))
        assert result.exit_code == 0, result.stderr
    report = report_of(asrkit_home / "datasets" / "odd")
    assert report["total"]["utterances"] == 2
    assert report["skipped"]["name not in UTF-8 (rename the file to import it)"]["files"] == [
        "caf\\xe9.txt", "caf\\xe9.wav", "d\\xe9j\\xe0"]


def test_dangling_links_and_fifos_are_skipped(tmp_path):
    """As git-annex and DVC leave them, and a named pipe that would block any reader."""
    root = tmp_path / "annexed"
    recording(root, "a")
    (root / "b.wav").symlink_to(".git/annex/objects/Xy/Zw/SHA256E-s1--0.wav")  # not fetched
    (root / "b.txt").write_text("we are sure")
    fetched = root / ".git/annex/objects/Ab/Cd/SHA256E-s2--1.wav"
    fetched.parent.mkdir(parents=True)
    shutil.copyfile(CLIPS["spk2_snt2"].path, fetched)
    (root / "d.wav").symlink_to(fetched.relative_to(root))  # fetched: read through the link
    (root / "d.txt").write_text(CLIPS["spk2_snt2"].transcript)
    os.mkfifo(root / "notes.txt")
    os.mkfifo(root / "c.wav")
    (root / "c.txt").write_text("what joy")
    home = tmp_path / "home"
    result = run_asrkit("import", "folder", str(root), "--no-progress", "--jobs", "1",
                        env={"ASRKIT_HOME": str(home)}, timeout=60)
    assert result.returncode == 0, result.stderr
    report = report_of(home / "datasets" / "annexed")
    assert report["splits"]["train"]["utterances"] == 2  # a and d; nothing from .git/
    assert "train/d" not in json.dumps(report["skipped"])
    assert report["skipped"]["dangling link"]["files"] == ["b.wav"]
    assert report["skipped"]["special file (pipe, socket or device)"]["files"] == [
        "c.wav", "notes.txt"]


def test_colliding_ids_get_distinct_names(asrkit_cli, asrkit_home, tmp_path):
    root = tmp_path / "takes"
    recording(root, "take_1", "spk1_snt1")
    recording(root, "take 1", "spk1_snt2")
    recording(root, "take-1", "spk2_snt1")
    result = asrkit_cli(corpora.import_args("folder", root))
    assert result.exit_code == 0, result.stderr
    dataset = asrkit_home / "datasets" / "takes"
    rows = (dataset / "train.csv").read_text().splitlines()[1:]
    by_file = {row.split(",")[0]: row.split(",")[2] for row in rows}
    assert by_file == {
        "audio/train/take-1.wav": CLIPS["spk2_snt1"].transcript.lower(),
        "audio/train/take_1.wav": CLIPS["spk1_snt1"].transcript.lower(),
        "audio/train/take_1_2.wav": CLIPS["spk1_snt2"].transcript.lower(),
    }


# -- encodings ----------------------------------------------------------------------------------


def test_decode_text_reads_every_common_encoding():
    text = "Où est l’été? naïve café"
    assert decode_text(text.encode("utf-8"), "x") == text
    assert decode_text(b"\xef\xbb\xbf" + text.encode("utf-8"), "x") == text
    assert decode_text(text.encode("utf-16"), "x") == text  # with its BOM
    assert decode_text(b"\xfe\xff" + text.encode("utf-16-be"), "x") == text
    assert decode_text(text.encode("cp1252"), "x") == text
    assert decode_text("café".encode("latin-1"), "x") == "café"
    assert decode_text(b"\x81\x8d ok", "x") == "\x81\x8d ok"  # bytes cp1252 lacks: Latin-1


def test_quote_truncates_long_input():
    assert quote("short") == "'short'"
    long = quote("x" * 10_000)
    assert long.startswith("'xxx") and long.endswith("...") and len(long) < 100


def test_latin1_librispeech_transcripts(asrkit_cli, asrkit_home, tmp_path):
    ls = corpora.librispeech_clips()
    tar = corpora.Tar()
    folder = "LibriSpeech/test-clean/61/70968"
    tar.file(f"{folder}/61-70968-0000.flac", corpora.converted(ls["61-70968-0000"].path, ".flac"))
    words = ls["61-70968-0000"].transcript.upper()
    tar.file(f"{folder}/61-70968.trans.txt", f"61-70968-0000 {words} CAFÉ\n".encode("latin-1"))
    archive = tmp_path / "test-clean.tar.gz"
    archive.write_bytes(tar.bytes())
    result = asrkit_cli(["import", "librispeech", "--subset", "test-clean", "--archive", archive,
                         "--no-verify", "--no-progress", "--jobs", "1"])
    assert result.exit_code == 0, result.stderr
    dataset = asrkit_home / "datasets" / "librispeech-test-clean"
    row = (dataset / "test.csv").read_text().splitlines()[1].split(",")
    assert row[2] == words.lower() + " cafe"
    assert report_of(dataset)["decoded"] == {f"{folder}/61-70968.trans.txt": "cp1252"}


def test_utf16_and_cp1252_in_folders_and_listings(asrkit_cli, asrkit_home, tmp_path):
    root = tmp_path / "encoded"
    recording(root, "a", text="")
    (root / "a.txt").write_bytes("Naïve café".encode("utf-16"))
    recording(root, "b", text="")
    (root / "b.txt").write_bytes("It’s naïve".encode("cp1252"))
    result = asrkit_cli(corpora.import_args("folder", root))
    assert result.exit_code == 0, result.stderr
    dataset = asrkit_home / "datasets" / "encoded"
    rows = {r.split(",")[0]: r.split(",")[2]
            for r in (dataset / "train.csv").read_text().splitlines()[1:]}
    assert rows == {"audio/train/a.wav": "naive cafe", "audio/train/b.wav": "it's naive"}
    assert report_of(dataset)["decoded"] == {"a.txt": "utf-16", "b.txt": "cp1252"}

    listed = tmp_path / "listed"
    listed.mkdir()
    shutil.copyfile(CLIPS["spk1_snt1"].path, listed / "x.wav")
    (listed / "list.csv").write_bytes("file,text\nx.wav,Café crème\n".encode("cp1252"))
    result = asrkit_cli(corpora.import_args("folder", listed))
    assert result.exit_code == 0, result.stderr
    assert "cafe creme" in (asrkit_home / "datasets/listed/train.csv").read_text()

    manifests = tmp_path / "ds"
    manifests.mkdir()
    shutil.copyfile(CLIPS["spk1_snt1"].path, manifests / "x.wav")
    (manifests / "train.csv").write_bytes(
        "wav_filename,wav_filesize,transcript\nx.wav,0,déjà vu\n".encode("utf-16"))
    result = asrkit_cli(corpora.import_args("csv", manifests / "train.csv"))
    assert result.exit_code == 0, result.stderr
    assert "deja vu" in (asrkit_home / "datasets/ds/train.csv").read_text()


# -- hostile archives ---------------------------------------------------------------------------


@pytest.fixture
def toy(make_plugins):
    return make_plugins(toy_importer)


def toy_archive(tmp_path: Path, **links) -> Path:
    files = {"toy/a.wav": CLIPS["spk1_snt1"].path.read_bytes(),
             "toy/transcripts.tsv": b"a.wav\ttrain\tthe child\nabs.wav\ttrain\tthe child\n"}
    archive = tmp_path / "toy.tar.gz"
    archive.write_bytes(tar_gz(files, **links))
    return archive


@pytest.mark.parametrize("target", ["/etc/passwd", "../../etc/passwd"])
def test_hardlinks_out_of_the_archive_are_refused(toy, asrkit_cli, asrkit_home, tmp_path,
                                                   target):
    archive = toy_archive(tmp_path, hardlinks={"toy/abs.wav": target})
    line = one_line_error(asrkit_cli(["import", "toy", "--archive", archive, "--no-progress"],
                                     toy))
    assert "refusing to read it" in line and "toy/abs.wav" in line
    assert not (asrkit_home / "datasets/toy/audio").exists()


def test_a_huge_transcript_is_refused_by_name(toy, asrkit_cli, asrkit_home, tmp_path):
    """A small archive whose transcript unpacks to far more than any transcript: refused before
    it is read, in one short line."""
    raw = io.BytesIO()
    size = 40 << 20
    with tarfile.open(fileobj=raw, mode="w:gz", compresslevel=1) as tar:
        info = tarfile.TarInfo("toy/transcripts.tsv")
        info.size = size
        tar.addfile(info, io.BytesIO(b"a" * size))
    archive = tmp_path / "toy.tar.gz"
    archive.write_bytes(raw.getvalue())
    assert archive.stat().st_size < 1 << 20
    line = one_line_error(asrkit_cli(["import", "toy", "--archive", archive, "--no-progress"],
                                     toy))
    assert "toy/transcripts.tsv" in line and len(line) < 300


def test_errors_quote_at_most_a_little_of_the_input(asrkit_cli, asrkit_home, tmp_path):
    tar = corpora.Tar()
    folder = "LibriSpeech/test-clean/61/70968"
    tar.file(f"{folder}/61-70968.trans.txt", "61-70968-0000" + "X" * 100_000 + "\n")
    archive = tmp_path / "test-clean.tar.gz"
    archive.write_bytes(tar.bytes())
    line = one_line_error(asrkit_cli(["import", "librispeech", "--subset", "test-clean",
                                      "--archive", archive, "--no-verify", "--no-progress"]))
    assert "61-70968.trans.txt:1" in line and len(line) < 300

    listed = tmp_path / "listed"
    listed.mkdir()
    (listed / "list.csv").write_text("file,text\nx.wav,\"" + "y" * 300_000 + "\"\n")
    line = one_line_error(asrkit_cli(corpora.import_args("folder", listed)))
    assert "list.csv" in line and len(line) < 300


# -- worker processes ---------------------------------------------------------------------------


def descendants(pid: int) -> set[int]:
    """Every live process below ``pid``."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                stat = (entry / "stat").read_text()
                parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    found, frontier = set(), {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier}
        found |= frontier
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")  # a zombie has exited; only its parent's wait is missing


def test_workers_die_with_a_killed_import(tmp_path):
    root = tmp_path / "many"
    root.mkdir()
    for i in range(150):  # 22.05 kHz: every file needs a sox process, so conversion takes time
        shutil.copyfile(LJ, root / f"lj{i:03d}.wav")
        (root / f"lj{i:03d}.txt").write_text("in eighteen thirteen")
    home = tmp_path / "home"
    journal = home / "datasets" / "many" / ".import" / "journal.jsonl"
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASRKIT_")}
    env["ASRKIT_HOME"] = str(home)
    process = subprocess.Popen([sys.executable, "-m", "asrkit", "import", "folder", str(root),
                                "--no-progress", "--jobs", "2"], env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while not (journal.exists() and len(journal.read_text().splitlines()) >= 5):
            assert process.poll() is None and time.monotonic() < deadline
            time.sleep(0.01)
        workers = descendants(process.pid)
        assert workers, "no worker processes"
        process.kill()  # kill -9 of the parent alone, as an OOM killer or a user does it
        process.wait()
        deadline = time.monotonic() + 5
        while any(alive(pid) for pid in workers) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not [pid for pid in workers if alive(pid)]
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)


# -- disk and path errors -----------------------------------------------------------------------


def test_asrkit_home_that_is_a_file(asrkit_cli, rec, tmp_path, monkeypatch):
    home = tmp_path / "home-file"
    home.write_text("not a folder\n")
    monkeypatch.setenv("ASRKIT_HOME", str(home))
    line = one_line_error(asrkit_cli(corpora.import_args("folder", rec)))
    assert str(home) in line and "not a folder" in line and "ASRKIT_HOME" in line
    assert home.read_text() == "not a folder\n"


@contextlib.contextmanager
def tmpfs(path: Path, *options: str):
    path.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", ",".join(options or ("size=1m",)),
                              "tmpfs", str(path)], capture_output=True, check=False)
    if mounted.returncode != 0:
        pytest.skip("mounting a tmpfs is not permitted here")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True, check=False)


def test_read_only_asrkit_home(asrkit_cli, rec, tmp_path, monkeypatch):
    with tmpfs(tmp_path / "ro", "size=1m", "ro") as home:
        monkeypatch.setenv("ASRKIT_HOME", str(home))
        line = one_line_error(asrkit_cli(corpora.import_args("folder", rec)))
        assert str(home) in line and "read-only" in line


def many_recordings(root: Path, count: int) -> Path:
    for i in range(count):
        recording(root, f"r{i:02d}", ("spk1_snt1", "spk1_snt2", "spk2_snt1")[i % 3])
    return root


def test_disk_full_then_rerun_continues(asrkit_cli, tmp_path, monkeypatch):
    root = many_recordings(tmp_path / "full", 12)  # about 1.5 MB of WAVs, twice in the shards
    with tmpfs(tmp_path / "disk", "size=1m") as disk:
        monkeypatch.setenv("ASRKIT_HOME", str(disk))
        line = one_line_error(asrkit_cli(corpora.import_args("folder", root)))
        assert "no space left" in line and str(disk) in line and "free" in line
        journal = disk / "datasets" / "full" / ".import" / "journal.jsonl"
        converted = len(journal.read_text().splitlines())
        assert converted > 0
        subprocess.run(["mount", "-o", "remount,size=64m", str(disk)], check=True)
        result = asrkit_cli(corpora.import_args("folder", root))
        assert result.exit_code == 0, result.stderr
        assert report_of(disk / "datasets" / "full")["total"]["utterances"] == 12


def test_disk_full_injected(asrkit_cli, asrkit_home, tmp_path):
    """The same without a mount: the 5th WAV a converting process writes fails with ENOSPC."""
    root = many_recordings(tmp_path / "full", 8)
    full = run_asrkit(*map(str, corpora.import_args("folder", root)), pythonpath=FAULTS,
                      env={"ASRKIT_HOME": str(asrkit_home), "ASRKIT_TEST_ENOSPC_AFTER": "4"},
                      timeout=300)
    line = one_line_error(CliResult(full.returncode, full.stdout, full.stderr))
    assert "no space left" in line and os.strerror(errno.ENOSPC) not in line
    dataset = asrkit_home / "datasets" / "full"
    assert str(dataset) in line
    assert not list(dataset.rglob("*.partial"))
    result = asrkit_cli(corpora.import_args("folder", root))
    assert result.exit_code == 0, result.stderr
    assert report_of(dataset)["total"]["utterances"] == 8
