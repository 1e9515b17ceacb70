"""The import engine every importer shares, and the ``asrkit import <name>`` commands.

An import runs in stages, each resumable:

1. **fetch**: download (resuming, verified) or take the user's archive/folder;
2. **scan**: one pass over the sources reads the small text members (an output folder inside
   a corpus folder is not part of the corpus);
3. **prepare**: the importer turns them into utterances; the core normalises and filters text;
4. **convert**: a second pass streams audio members to worker processes, which decode each
   recording once, cut its segments and write 16 kHz mono 16-bit WAVs; finished members are
   appended to a journal in groups, each once its WAVs are on disk (fsynced), so a killed run
   continues where it stopped, and one cut by a power failure never trusts an empty WAV;
5. **write**: CSVs, TFRecord shards and ``dataset.json`` (written last: its presence means done).

Everything written is a pure function of the sources and the options, so a run that was killed
and rerun produces byte-identical output to one that never stopped.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import math
import os
import re
import shutil
from collections import defaultdict, deque
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import (
    FIRST_COMPLETED,
    Future,
    ProcessPoolExecutor,
    ThreadPoolExecutor,
    wait,
)
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tqdm import tqdm

from asrkit import __version__
from asrkit.core.errors import AsrkitError
from asrkit.core.files import append_line, sync_files, sync_to_disk, write_atomic, write_json
from asrkit.core.frames import SAMPLE_RATE
from asrkit.core.locks import lock_path
from asrkit.core.storage import Location
from asrkit.core.text import Alphabet, normalize, quote, recording_decodings
from asrkit.dataset.audio import read_wav
from asrkit.dataset.folders import (
    DATASET_JSON,
    DEFAULT_MAX_SECONDS,
    MAX_MEMBER_BYTES,
    asrkit_home,
)
from asrkit.dataset.manifest import Row, csv_text
from asrkit.dataset.shards import SHARD_DIR, ShardRecord, is_shard_of, shard_name, write_shard
from asrkit.importing import download, outputs
from asrkit.importing.archive import (
    MAX_METADATA_BYTES,
    MAX_METADATA_TOTAL_BYTES,
    Scan,
    Source,
    scan_sources,
)
from asrkit.importing.convert import (
    SegmentJob,
    SegmentResult,
    convert_batch,
    convert_member,
    die_with_parent,
)
from asrkit.types import DATASET_NAME, Importer, Resource, Utterance

FORMAT_VERSION = 1
STATE_DIR = ".import"
JOURNAL = "journal.jsonl"
#: Target size of one TFRecord shard; small splits still get a few shards so that several
#: workers can each read their own.
SHARD_BYTES = 64 << 20
MIN_SHARDS = 4
_UNSAFE_ID = re.compile(r"[^A-Za-z0-9._-]")
#: The longest utterance id, in characters (ASCII once made safe): a WAV's name is the id and a
#: suffix or two (``_2``, ``.wav``, ``.partial``), within the 255 bytes of a file name.
MAX_ID_CHARS = 200


@dataclass(frozen=True)
class ImportConfig:
    """Options every import shares (the importer's own options travel separately)."""

    home: Path = field(default_factory=asrkit_home)
    output: Path | None = None
    mirror: str | None = None
    archives: tuple[Path, ...] = ()
    verify: bool = True
    jobs: int = field(default_factory=lambda: os.cpu_count() or 1)
    force: bool = False
    max_seconds: float = DEFAULT_MAX_SECONDS
    #: The largest recording read (``--max-file-size``); a larger one is skipped unread.
    max_member_bytes: int = MAX_MEMBER_BYTES
    alphabet: Alphabet = field(default_factory=Alphabet)
    progress: bool = True


@dataclass
class ImportResult:
    dataset: Location
    report: dict[str, Any]
    did_work: bool


# -- stage 1: fetch ----------------------------------------------------------------------------


def _download_options(config: ImportConfig) -> download.DownloadOptions:
    return download.DownloadOptions(mirror=config.mirror, verify=config.verify,
                                    progress=config.progress)


def _expectations(resources: list[Resource], config: ImportConfig
                  ) -> dict[str, download.Expected]:
    """What each file to download will be verified against (the mirror's ``SHA256SUMS``, else
    the published values), by file name; the user's own files are not downloaded."""
    options = _download_options(config)
    archives = {path.name: path for path in config.archives}
    return {resource.filename: download.expected_for(
                resource, download.mirrored(resource.url, config.mirror), options)
            for resource in resources
            if resource.url is not None and resource.path is None
            and _given_archive(resource, resources, config.archives, archives) is None}


def _fetch(resources: list[Resource], config: ImportConfig,
           expectations: dict[str, download.Expected]) -> tuple[list[Path], list[dict]]:
    """Local paths of every resource, verified; and what was verified, for ``dataset.json``."""
    options = _download_options(config)
    archives = {path.name: path for path in config.archives}
    paths, record = [], []
    for resource in resources:
        given = resource.path or _given_archive(resource, resources, config.archives, archives)
        if given is not None:
            path = Path(given)
            if not path.exists():
                raise AsrkitError(f"{path} does not exist")
            digest = None
            if path.is_file():
                expected = download.Expected(resource.size, resource.sha256, download.PUBLISHED)
                digest = download.verify_file(path, expected, options, set_aside=False)
        elif resource.url is None:
            raise AsrkitError(
                f"{resource.filename} cannot be downloaded; download it yourself and pass "
                "--archive PATH"
            )
        else:
            path, digest = download.fetch(resource, config.home / "downloads", options,
                                          expectations[resource.filename])
        paths.append(path)
        record.append({"filename": path.name if given is not None else resource.filename,
                       "url": resource.url, "sha256": digest})
    return paths, record


def _given_archive(resource: Resource, resources: list[Resource], given: tuple[Path, ...],
                   by_name: dict[str, Path]) -> Path | None:
    if resource.filename in by_name:
        return by_name[resource.filename]
    if len(resources) == 1 and len(given) == 1:
        return given[0]
    return None


# -- stage 2: scan -----------------------------------------------------------------------------


class CorpusSource(Source):
    """A source that leaves out the import's own files: its dataset folder and that folder's
    lock, when they lie inside a corpus folder (``asrkit import folder corpus --output
    corpus/ds``). Otherwise a rerun would find the corpus changed (the output's files are new
    every run) and restart, and would import the output's WAVs as recordings of the corpus."""

    def __init__(self, path: str | Path, dataset: Path, progress: bool = True,
                 member_limit: int = MAX_MEMBER_BYTES) -> None:
        super().__init__(path, progress, member_limit)
        self.own = own_members(self.path, dataset) if self.kind == "dir" else ()

    def is_own(self, name: str) -> bool:
        """Whether the member ``name`` is the dataset folder, its lock, or inside the folder."""
        return any(name == own or name.startswith(own + "/") for own in self.own)

    def scan(self, into: Scan, is_metadata: Callable[[str], bool],
             limit: int = MAX_METADATA_BYTES, total: int = MAX_METADATA_TOTAL_BYTES) -> None:
        if not self.own:
            super().scan(into, is_metadata, limit, total)
            return
        part = Scan()
        super().scan(part, lambda name: not self.is_own(name) and is_metadata(name), limit,
                     total)
        links = {name: target for name, target in part.links.items()
                 if not self.is_own(name) and not self.is_own(target)}
        into.members += [name for name in part.members
                         if not self.is_own(name) and (name in links or name not in part.links)]
        into.metadata.update(part.metadata)  # nothing of the dataset's was read
        into.links.update(links)
        into.skipped.update({name: why for name, why in part.skipped.items()
                             if not self.is_own(name)})

    def listing(self) -> Iterator[tuple[str, int, int]]:
        return (entry for entry in super().listing() if not self.is_own(entry[0]))


def own_members(root: Path, dataset: Path) -> tuple[str, ...]:
    """The member names, in the folder ``root``, of ``dataset`` and of its lock (beside it),
    for those inside ``root``; links resolved, as the folder's walk resolves them."""
    real, lock = root.resolve(), lock_path(dataset)
    assert isinstance(lock, Path)  # a local dataset's lock is local
    return tuple(path.relative_to(real).as_posix()
                 for path in (dataset.resolve(), lock) if real in path.parents)


# -- stage 3: prepare --------------------------------------------------------------------------


@dataclass(frozen=True)
class Planned:
    """An utterance that passed the text checks, with its normalised transcript."""

    utterance: Utterance
    transcript: str
    member: str

    @property
    def key(self) -> str:
        return f"{self.utterance.split}/{self.utterance.id}"

    @property
    def path(self) -> str:
        return f"audio/{self.utterance.split}/{self.utterance.id}.wav"


def safe_id(text: str) -> str:
    """An utterance id usable as a file name: unsafe characters replaced, and an id longer
    than :data:`MAX_ID_CHARS` (a folder corpus's id is the file's whole path, which can pass
    the 255 bytes a file name may have) cut, with a digest of the whole id kept so that
    ids sharing a long beginning stay apart."""
    safe = _UNSAFE_ID.sub("_", text)
    if len(safe) <= MAX_ID_CHARS:
        return safe
    digest = hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()[:16]
    return f"{safe[:MAX_ID_CHARS - 17]}_{digest}"


def plan(utterances: Iterator[Utterance], importer: Importer, members: set[str],
         resolve: Callable[[str], str],
         config: ImportConfig) -> tuple[list[Planned], dict[str, list[str]]]:
    """Normalise transcripts and sort out what cannot be trained on before any audio is read."""
    planned: list[Planned] = []
    skipped: dict[str, list[str]] = defaultdict(list)
    raws = list(utterances)
    for raw, uid in zip(raws, distinct_ids(raws, importer), strict=True):
        utterance = Utterance(**{**asdict(raw), "id": uid})
        key = f"{utterance.split}/{utterance.id}"
        text = normalize(importer.normalize(utterance.transcript), config.alphabet.symbols)
        missing = config.alphabet.missing(text)
        member = resolve(utterance.audio)
        reason = None
        if member not in members:
            reason = "audio file missing"
        elif not text:
            reason = "empty transcript"
        elif missing:
            reason = "characters outside the alphabet"
        elif (utterance.start is not None and utterance.end is not None
              and utterance.end - utterance.start > config.max_seconds):
            reason = "too long"
        elif (utterance.start is not None and utterance.end is not None
              and utterance.end <= utterance.start):
            reason = "no audio"
        if reason:
            skipped[reason].append(key)
        else:
            planned.append(Planned(utterance, text, member))
    return planned, skipped


def distinct_ids(utterances: list[Utterance], importer: Importer) -> list[str]:
    """File-safe ids (:func:`safe_id`), distinct within each split. Ids that only the
    replaced characters told apart (``take 1`` and ``take_1``) get a numeric suffix: an id
    that was safe already keeps its name, the others, in sorted order, become ``take_1_2``,
    ``take_1_3``... The same corpus always gives the same names."""
    groups: dict[tuple[str, str], set[str]] = defaultdict(set)
    seen: set[tuple[str, str]] = set()
    for u in utterances:
        if (u.split, u.id) in seen:
            raise AsrkitError(
                f"importer {importer.name!r} produced utterance {quote(u.split + '/' + u.id)} "
                "twice; report this to the importer's authors"
            )
        seen.add((u.split, u.id))
        groups[(u.split, safe_id(u.id))].add(u.id)
    taken = set(groups)
    names: dict[tuple[str, str], str] = {}
    for (split, base), raw_ids in sorted(groups.items()):
        ordered = sorted(raw_ids, key=lambda raw: (raw != base, raw))
        names[(split, ordered[0])] = base
        number = 1
        for raw in ordered[1:]:
            number += 1
            while (split, f"{base}_{number}") in taken:
                number += 1
            taken.add((split, f"{base}_{number}"))
            names[(split, raw)] = f"{base}_{number}"
    return [names[(u.split, u.id)] for u in utterances]


# -- stage 4: convert --------------------------------------------------------------------------


def remove_partials(dataset: Path) -> None:
    """Delete the half-written files (``*.partial``) of a killed import of ``dataset``: the
    converters name theirs by process id, so a rerun would never write over them. The import
    holds the dataset's lock, so no other process is writing them."""
    for partial in dataset.rglob("*.partial"):
        if partial.is_file() and not partial.is_symlink():
            partial.unlink(missing_ok=True)


class Journal:
    """Finished members, one JSON line each; a torn last line (killed mid-write) is ignored."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.done: dict[str, list[SegmentResult]] = {}
        if path.exists():
            data = path.read_bytes()  # a torn last line fails to parse; the next add cuts it
            for line in data.decode("utf-8", errors="replace").splitlines():
                try:
                    entry = json.loads(line)
                except json.JSONDecodeError:
                    continue
                self.done[entry["member"]] = [SegmentResult(**r) for r in entry["results"]]

    def add(self, member: str, results: list[SegmentResult]) -> None:
        """Record ``member`` as done; its WAVs must be on disk already (:class:`GroupCommit`)."""
        self.done[member] = results
        line = json.dumps({"member": member, "results": [asdict(r) for r in results]})
        # Flushed, not fsynced: a killed process loses nothing the kernel already has, and a
        # power cut at worst repeats the conversion of the members whose lines were lost.
        append_line(self.path, line)


#: Threads that fsync a group of converted recordings side by side.
SYNC_THREADS = 8
#: Groups converted but not yet journaled, at most: a kill repeats at most these.
MAX_PENDING_COMMITS = 4

Finished = tuple[str, list[SegmentResult]]


class GroupCommit:
    """Journals converted members a group at a time, each group once its WAVs are on disk.

    A journal line makes a rerun trust its member's WAVs, so they must reach the disk first:
    otherwise a power cut can leave a journaled member with an empty WAV (the rename reaches the
    disk before the data). An fsync per file as each is written cost a fifth of the import's
    speed. Here a group's files are synced side by side (the filesystem commits them together),
    each folder once per group, and in a thread of its own: conversion goes on meanwhile."""

    def __init__(self, dataset: Path, journal: Journal, paths: Mapping[str, str]) -> None:
        self.dataset = dataset
        self.journal = journal
        self.paths = paths  # utterance key -> its WAV, relative to the dataset
        self.known: set[Path] = set()
        self.syncs = ThreadPoolExecutor(SYNC_THREADS, thread_name_prefix="asrkit-sync")
        self.writer = ThreadPoolExecutor(1, thread_name_prefix="asrkit-commit")  # in order
        self.pending: deque[Future] = deque()

    def __call__(self, finished: list[Finished]) -> None:
        """Commit ``finished`` in the background; raise the error of an earlier commit."""
        while self.pending and (self.pending[0].done()
                                or len(self.pending) >= MAX_PENDING_COMMITS):
            self.pending.popleft().result()
        if finished:
            self.pending.append(self.writer.submit(self._commit, finished))

    def flush(self) -> None:
        """Wait until every group is journaled; raise the error of one that could not be."""
        while self.pending:
            self.pending.popleft().result()

    def close(self) -> None:
        """Finish the commits under way (an import that failed keeps what it converted; their
        own errors are dropped then: the import's error is the one to report)."""
        self.writer.shutdown(wait=True)
        self.syncs.shutdown(wait=True)

    def _commit(self, finished: list[Finished]) -> None:
        wavs = [self.dataset / self.paths[r.key]
                for _, results in finished for r in results if r.reason is None]
        sync_files(wavs, self.syncs)
        self._sync_new_folders({wav.parent for wav in wavs})
        for member, results in finished:
            self.journal.add(member, results)

    def _sync_new_folders(self, folders: set[Path]) -> None:
        """The first time a folder holds WAVs, the entry that names it in its parent, and so
        on up to the dataset folder (``train/`` in ``audio/``, ``audio/`` in the dataset): the
        converters made them, and a folder lost in a power cut loses its WAVs."""
        parents = set()
        for folder in folders:
            while folder not in self.known and folder not in (self.dataset, folder.parent):
                self.known.add(folder)
                folder = folder.parent
                parents.add(folder)
        for parent in sorted(parents):
            sync_to_disk(parent)


def convert(sources: list[Source], planned: list[Planned], dataset: Path, journal: Journal,
            config: ImportConfig) -> None:
    """Stream the audio members that the journal lacks to the converters."""
    by_member: dict[str, list[SegmentJob]] = defaultdict(list)
    for item in planned:
        if item.member in journal.done:
            continue
        u = item.utterance
        by_member[item.member].append(
            SegmentJob(item.key, item.path, u.start, u.end, len(item.transcript))
        )
    if not by_member:
        return
    total = sum(len(jobs) for jobs in by_member.values())
    bar = tqdm(total=total, unit="utt", desc="convert", disable=not config.progress,
               smoothing=0.1)
    commit = GroupCommit(dataset, journal,
                         {job.key: job.path for jobs in by_member.values() for job in jobs})
    audio_seconds = 0.0

    def finish(finished: list[Finished]) -> None:
        nonlocal audio_seconds
        commit(finished)
        results = [r for _, member in finished for r in member]
        audio_seconds += sum(r.samples for r in results if r.reason is None) / SAMPLE_RATE
        bar.update(len(results))
        bar.set_postfix_str(f"{audio_seconds / 3600:.2f} h audio")

    wanted = set(by_member)
    stream = (item for source in sources for item in source.stream(wanted))
    try:
        if config.jobs <= 1:
            _convert_serial(stream, by_member, dataset, config, finish)
        else:
            _convert_parallel(stream, by_member, dataset, config, finish)
        commit.flush()
    finally:
        commit.close()
        bar.close()


#: A worker task holds up to this many members or bytes: short files travel in batches. A
#: group commit (:class:`GroupCommit`) holds a batch (all that came back, with ``--jobs N``).
BATCH_MEMBERS = 16
BATCH_BYTES = 8 << 20


def _batches(stream: Iterator[tuple[str, bytes]], by_member: dict[str, list[SegmentJob]]
             ) -> Iterator[list[tuple[str, bytes, list[SegmentJob]]]]:
    batch: list[tuple[str, bytes, list[SegmentJob]]] = []
    size = 0
    for name, data in stream:
        batch.append((name, data, by_member[name]))
        size += len(data)
        if len(batch) >= BATCH_MEMBERS or size >= BATCH_BYTES:
            yield batch
            batch, size = [], 0
    if batch:
        yield batch


def _convert_serial(stream: Iterator[tuple[str, bytes]], by_member: dict[str, list[SegmentJob]],
                    dataset: Path, config: ImportConfig,
                    finish: Callable[[list[Finished]], None]) -> None:
    """Convert in this process, committing a batch's worth at a time. On an error (a full
    disk, Ctrl-C) the members converted before it are committed too, so a rerun keeps them."""
    finished: list[Finished] = []
    size = 0
    try:
        for name, data in stream:
            finished.append(convert_member(str(dataset), name, data, by_member[name],
                                           config.max_seconds))
            size += sum(r.size for r in finished[-1][1])
            if len(finished) >= BATCH_MEMBERS or size >= BATCH_BYTES:
                finish(finished)
                finished, size = [], 0
    except BaseException:
        with contextlib.suppress(OSError):  # the first error is the one to report
            finish(finished)
        raise
    finish(finished)


def _convert_parallel(stream: Iterator[tuple[str, bytes]], by_member: dict[str, list[SegmentJob]],
                      dataset: Path, config: ImportConfig,
                      finish: Callable[[list[Finished]], None]) -> None:
    limit = 2 * config.jobs  # batches in flight: bounds memory whatever the corpus size
    pending: set[Future] = set()

    def collect(futures: set[Future]) -> None:
        """One group commit for every batch that has come back."""
        finish([member for future in futures for member in future.result()])

    # Workers end with the import, however it ends: killed (they watch their parent), failed
    # or interrupted (the pool is shut down here, unfinished batches cancelled).
    pool = ProcessPoolExecutor(max_workers=config.jobs, initializer=die_with_parent,
                               initargs=(os.getpid(),))
    try:
        for batch in _batches(stream, by_member):
            pending.add(pool.submit(convert_batch, str(dataset), batch, config.max_seconds))
            if len(pending) >= limit:
                done, pending = wait(pending, return_when=FIRST_COMPLETED)
                collect(done)
        collect(pending)
    except BaseException:
        workers = list((getattr(pool, "_processes", None) or {}).values())
        pool.shutdown(wait=False, cancel_futures=True)
        for worker in workers:
            worker.terminate()
        for worker in workers:
            worker.join(timeout=5)
        raise
    finally:
        pool.shutdown(wait=True)


# -- stage 5: write ----------------------------------------------------------------------------


def shard_count(total_bytes: int, utterances: int) -> int:
    return max(math.ceil(total_bytes / SHARD_BYTES), min(utterances, MIN_SHARDS), 1)


def write_shards(dataset: Path, split: str, rows: list[tuple[str, Row]],
                 progress: bool) -> list[str]:
    """Write ``split``'s shards (round-robin over the id-sorted rows); existing shards are
    complete (written atomically) and kept."""
    count = shard_count(sum(row.wav_filesize for _, row in rows), len(rows))
    names = [shard_name(split, i, count) for i in range(count)]
    for stale in (dataset / SHARD_DIR).glob(f"{split}-*.tfrecord*"):
        if is_shard_of(stale.name, split, partial=True) and stale.name not in names:
            stale.unlink()
    todo = [i for i in range(count) if not (dataset / SHARD_DIR / names[i]).exists()]
    with tqdm(total=sum(len(rows[i::count]) for i in todo), unit="utt", desc=f"shard {split}",
              disable=not progress or not todo) as bar:
        for i in todo:
            def records(part: list[tuple[str, Row]] = rows[i::count]) -> Iterator[ShardRecord]:
                for utterance_id, row in part:
                    audio = read_wav(dataset / row.wav_filename).tobytes()
                    bar.update(1)
                    yield ShardRecord(utterance_id, audio, row.transcript, row.speaker)

            try:
                write_shard(dataset / SHARD_DIR / names[i], records())
            except OSError:
                raise
            except Exception as error:  # TensorFlow's writer raises its own errors
                if "No space left" in str(error):
                    raise OSError(errno.ENOSPC, "No space left on device",
                                  str(dataset / SHARD_DIR / names[i])) from None
                raise
    return names


def _fingerprint(importer: Importer, options: Mapping[str, Any], resources: list[Resource],
                 config: ImportConfig, expectations: dict[str, download.Expected],
                 dataset: Path) -> dict:
    """What the output depends on. Compared before anything is fetched, so it must be cheap:
    for a download, the checksum it is verified against (a mirror's ``SHA256SUMS`` or the
    published one: an import of a mirror's file is not taken for one of the published file),
    and size and time stamps for the user's own files (but not of ``dataset``'s own files,
    should it lie inside the corpus: they change with every run)."""
    return {
        "format": FORMAT_VERSION,
        "importer": importer.name,
        "options": {k: _jsonable(v) for k, v in sorted(options.items())},
        "sources": [_source_key(r, resources, config, expectations, dataset)
                    for r in resources],
        "max_seconds": config.max_seconds,
        "alphabet": list(config.alphabet.symbols),
        # Only when changed: datasets imported before the option keep their fingerprint.
        **({"max_member_bytes": config.max_member_bytes}
           if config.max_member_bytes != MAX_MEMBER_BYTES else {}),
    }


def _source_key(resource: Resource, resources: list[Resource], config: ImportConfig,
                expectations: dict[str, download.Expected], dataset: Path) -> dict[str, Any]:
    given = resource.path or _given_archive(resource, resources, config.archives,
                                            {p.name: p for p in config.archives})
    if given is None:
        expected = expectations.get(resource.filename)
        return {"filename": resource.filename,
                "sha256": expected.sha256 if expected else resource.sha256}
    path = Path(given).resolve()
    if not path.exists():
        raise AsrkitError(f"{path} does not exist")
    source = CorpusSource(path, dataset, progress=False)
    listing = hashlib.sha256()
    for name, size, mtime in sorted(source.listing()):
        shown = f"{path.name}/{name}" if source.kind == "dir" else name
        listing.update(f"{shown}|{size}|{mtime}\n".encode())
    return {"path": str(path), "listing": listing.hexdigest()}


def _jsonable(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, tuple | list):
        return [_jsonable(v) for v in value]
    return value


def run_import(importer: Importer, options: Mapping[str, Any], config: ImportConfig,
               provider: str = "") -> ImportResult:
    """Import a corpus into ``<home>/datasets/<dataset name>`` (or ``config.output``)."""
    name = importer.dataset_name(options)
    if not DATASET_NAME.match(name):
        raise AsrkitError(f"dataset name {quote(name)}: use letters, digits, '.', '_', '+' "
                          "and '-'")
    dataset = config.output or config.home / "datasets" / name
    try:
        return _import(importer, options, config, provider, name, dataset)
    except OSError as error:
        problem = disk_error(error, dataset, config)
        if problem is None:
            raise
        raise problem from None


def _import(importer: Importer, options: Mapping[str, Any], config: ImportConfig,
            provider: str, name: str, dataset: Path) -> ImportResult:
    state = dataset / STATE_DIR
    resources = importer.resources(options)
    expectations = _expectations(resources, config)
    fingerprint = _fingerprint(importer, options, resources, config, expectations, dataset)
    report_path = dataset / DATASET_JSON
    inputs = [(Path(r.path), "the corpus this import reads") for r in resources if r.path]
    inputs += [(path, "the corpus this import reads") for path in config.archives]
    if config.force and dataset.exists():
        outputs.remove(dataset, outputs.DATASET, inputs)
    if report_path.exists():
        report = json.loads(report_path.read_text(encoding="utf-8"))
        if report.get("fingerprint") == fingerprint:
            return ImportResult(dataset, report, did_work=False)
        raise AsrkitError(
            f"{dataset} holds an import made with other options or from other files (another "
            "mirror's checksums, say); pass --force to redo it, or --output to import elsewhere"
        )
    saved = state / "fingerprint.json"
    if saved.exists() and json.loads(saved.read_text()) != fingerprint:
        outputs.remove(dataset, outputs.DATASET, inputs)  # an unfinished import of other options
    outputs.claim(dataset, outputs.DATASET)
    if state.exists():
        remove_partials(dataset)
    state.mkdir(exist_ok=True)
    write_json(saved, fingerprint)

    paths, fetched = _fetch(resources, config, expectations)
    sources: list[Source] = [CorpusSource(path, dataset, progress=config.progress,
                                          member_limit=config.max_member_bytes)
                             for path in paths]
    scan = scan_sources(sources, importer.is_metadata, importer.max_metadata_bytes)
    with recording_decodings() as decoded:
        utterances = importer.prepare(scan.metadata, scan.members, options)
        planned, skipped = plan(iter(utterances), importer, set(scan.members), scan.resolve,
                                config)

    journal = Journal(state / JOURNAL)
    convert(sources, planned, dataset, journal, config)

    results = {r.key: r for member in journal.done.values() for r in member}
    by_split: dict[str, list[tuple[str, Row]]] = defaultdict(list)
    errors: dict[str, str] = {}
    for item in planned:
        result = results.get(item.key)
        if result is None:  # removed or changed between the two passes over a folder
            skipped["unreadable audio"].append(item.key)
            errors[item.member] = "could not be read (removed or changed during the import)"
            continue
        if result.reason:
            skipped[result.reason].append(item.key)
            if result.detail:
                errors[item.member] = result.detail
            continue
        row = Row(item.path, result.size, item.transcript, result.samples / SAMPLE_RATE,
                  item.utterance.speaker)
        by_split[item.utterance.split].append((item.utterance.id, row))

    splits = {}
    for split in sorted(by_split, key=_split_order(importer)):
        rows = sorted(by_split[split])
        write_atomic(dataset / f"{split}.csv", csv_text(row for _, row in rows))
        shards = write_shards(dataset, split, rows, config.progress)
        seconds = sum(row.duration or 0 for _, row in rows)
        splits[split] = {
            "csv": f"{split}.csv",
            "shards": [f"shards/{s}" for s in shards],
            "utterances": len(rows),
            "seconds": round(seconds, 3),
            "hours": round(seconds / 3600, 4),
            "speakers": len({row.speaker for _, row in rows if row.speaker}),
        }
    config.alphabet.save(dataset / "alphabet.txt")
    report = {
        "name": name,
        "importer": importer.name,
        "provider": provider,
        "asrkit_version": __version__,
        "description": importer.description,
        "homepage": importer.homepage,
        "license": importer.license,
        "source": fetched,
        "splits": splits,
        "total": {
            "utterances": sum(s["utterances"] for s in splits.values()),
            "hours": round(sum(s["seconds"] for s in splits.values()) / 3600, 4),
        },
        "skipped": _skipped(skipped, scan.skipped),
        "errors": dict(sorted(errors.items())),
        "decoded": dict(sorted(decoded.items())),
        "fingerprint": fingerprint,
    }
    write_json(report_path, report)
    return ImportResult(dataset, report, did_work=True)


def _skipped(utterances: dict[str, list[str]], files: dict[str, str]) -> dict[str, dict]:
    """Per reason: the utterances (``split/id``) and the source files (links, pipes...) that
    were left out."""
    by_reason: dict[str, list[str]] = defaultdict(list)
    for member, reason in files.items():
        by_reason[reason].append(member)
    out = {}
    for reason in sorted(set(utterances) | set(by_reason)):
        keys, names = sorted(utterances.get(reason, [])), sorted(by_reason.get(reason, []))
        out[reason] = {"count": len(keys) + len(names), "utterances": keys}
        if names:
            out[reason]["files"] = names
    return out


#: What a failed write means to the user, by errno.
_DISK_FULL = {errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)}


def disk_error(error: OSError, dataset: Path, config: ImportConfig) -> AsrkitError | None:
    """One line for an import that could not write (disk full, read-only, not a folder, no
    permission), naming the path and what to do; ``None`` for any other error."""
    path = Path(error.filename) if error.filename else dataset
    where = "ASRKIT_HOME" if config.output is None else "--output"
    if error.errno in _DISK_FULL:
        free = shutil.disk_usage(_existing(dataset)).free
        return AsrkitError(
            f"no space left on the disk holding {dataset} ({free / 2**20:,.1f} MB free) while "
            f"writing {path}; free some space and rerun: the import continues where it stopped"
        )
    if error.errno == errno.EROFS:
        return AsrkitError(f"{path} is on a read-only filesystem; set {where} to a folder "
                           "you can write to")
    if error.errno in (errno.EACCES, errno.EPERM):
        return AsrkitError(f"no permission to write {path}; set {where} to a folder you can "
                           "write to, or change its permissions")
    if error.errno in (errno.ENOTDIR, errno.EEXIST):
        blocking = _existing(dataset)
        if not blocking.is_dir():
            return AsrkitError(f"{blocking} is not a folder (it is a file), so {dataset} cannot "
                               f"be made; set {where} to a folder, or move the file away")
    return None


def _existing(path: Path) -> Path:
    """``path`` or its nearest ancestor that exists."""
    path = path.absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def _split_order(importer: Importer) -> Callable[[str], tuple[int, str]]:
    order = {split: i for i, split in enumerate(importer.splits)}
    return lambda split: (order.get(split, len(order)), split)
