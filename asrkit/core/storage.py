"""Folders and files at a URL (``gs://bucket/...``, ``s3://``, ``hdfs://``, ``ram://``), read and
written through TensorFlow's own filesystem layer (``tf.io.gfile``).

Datasets, run folders and exports may live in object storage, as they do for teams that train
at scale. Rather than a second code path for every file asrkit touches, a location is either a
:class:`pathlib.Path` (a local path) or a :class:`StoragePath` (a URL) with the part of
``pathlib``'s interface asrkit uses: joining with ``/``, ``name``/``parent``, ``exists``,
``mkdir``, ``iterdir``, ``glob``, ``open``, ``read_text``/``write_text``, ``unlink``,
``replace``. :func:`location` picks the one a user's string names, so code written against
``Path`` reads and writes either. TensorFlow's own readers and writers (TFRecord shards,
checkpoints, SavedModels, TensorBoard events) take the URL string as they take a local path.

What POSIX gives for free and object storage does not, and what asrkit does instead:

- **Atomic replacement.** A rename is a server-side copy and a delete. An object becomes
  visible only whole, when its upload is finalised, so a pointer written as ``name.partial``
  and renamed over ``name`` is read either old or new, never half (:mod:`asrkit.core.files`).
- **Durability.** An object is durable once its upload is finalised (when the writer closes
  it); there is nothing to fsync.
- **Appending.** Objects cannot grow: a line appended to ``metrics.jsonl`` rewrites it.
- **Locks.** There is no ``flock``; see :mod:`asrkit.core.locks` for the rule.
"""

from __future__ import annotations

import contextlib
import fnmatch
import os
import posixpath
import re
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from asrkit.core.errors import AsrkitError

#: Schemes whose folders are prefixes of object names, made by writing an object.
OBJECT_STORES = ("gs", "s3")
#: ``scheme://``: the start of a URL that names a location of a filesystem TensorFlow knows.
_URL = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*://")


class StorageError(AsrkitError):
    """A location at a URL could not be read or written: the bucket is unreachable or missing,
    credentials are missing or refused, or the scheme is unknown to TensorFlow."""


def storage_problem(error: BaseException, url: str = "") -> str:
    """One line for a failure of TensorFlow's filesystem layer at a URL, saying what to check."""
    message = getattr(error, "message", None) or str(error)
    first = " ".join(message.split())[:300]
    where = f"{url}: " if url else ""
    hint = ("check the URL, that the bucket exists and that this machine may reach it "
            "(credentials: GOOGLE_APPLICATION_CREDENTIALS or the cloud's metadata server)")
    if "not implemented" in first.lower() or "unimplemented" in type(error).__name__.lower():
        hint = ("TensorFlow has no filesystem for this scheme here (gs:// is built in; s3:// "
                "and others need tensorflow-io)")
    return f"cannot use {where}{first}; {hint}"


def is_url(value: str | os.PathLike[str] | StoragePath) -> bool:
    """Whether ``value`` names a location by URL (``gs://...``) rather than a local path."""
    return isinstance(value, StoragePath) or bool(_URL.match(os.fspath(value)))


def as_text(value: str | os.PathLike[str] | StoragePath) -> str:
    """A location as the string TensorFlow's readers and writers take (a path or a URL)."""
    return str(value) if isinstance(value, StoragePath) else os.fspath(value)


class StoragePath:
    """A file or folder at a URL, with the ``pathlib.Path`` methods asrkit uses, each done by
    ``tf.io.gfile``. Folders in object storage are prefixes: a folder exists once something is
    in it. It has no ``__fspath__`` on purpose: ``Path(url)`` or ``open(url)`` would otherwise
    quietly make a local folder named ``gs:``; they fail instead, and ``str(url)`` gives the
    URL where TensorFlow takes one."""

    __slots__ = ("_url",)

    def __init__(self, url: str | StoragePath) -> None:
        url = str(url)
        scheme, _, rest = url.partition("://")
        rest = posixpath.normpath(rest) if rest not in ("", "/") else rest
        self._url = f"{scheme}://{'' if rest == '.' else rest}"

    # The path's parts.

    def __str__(self) -> str:
        return self._url

    def __repr__(self) -> str:
        return f"StoragePath({self._url!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, StoragePath) and other._url == self._url

    def __lt__(self, other: StoragePath) -> bool:
        return self._url < other._url

    def __hash__(self) -> int:
        return hash(self._url)

    def __truediv__(self, part: str) -> StoragePath:
        return StoragePath(posixpath.join(self._url, part))

    @property
    def in_object_store(self) -> bool:
        """Whether folders here are only prefixes of object names (``gs://``, ``s3://``)."""
        return self._url.partition("://")[0] in OBJECT_STORES

    @property
    def _rest(self) -> str:
        return self._url.partition("://")[2]

    @property
    def name(self) -> str:
        return posixpath.basename(self._rest.rstrip("/"))

    @property
    def suffix(self) -> str:
        return posixpath.splitext(self.name)[1]

    @property
    def stem(self) -> str:
        return posixpath.splitext(self.name)[0]

    @property
    def parent(self) -> StoragePath:
        scheme = self._url.partition("://")[0]
        return StoragePath(f"{scheme}://{posixpath.dirname(self._rest.rstrip('/'))}")

    def with_name(self, name: str) -> StoragePath:
        return self.parent / name

    def with_suffix(self, suffix: str) -> StoragePath:
        return self.parent / (self.stem + suffix)

    def relative_to(self, other: StoragePath) -> str:
        prefix = str(other).rstrip("/") + "/"
        if not self._url.startswith(prefix):
            raise ValueError(f"{self} is not in {other}")
        return self._url[len(prefix):]

    def resolve(self) -> StoragePath:
        return self

    def absolute(self) -> StoragePath:
        return self

    def expanduser(self) -> StoragePath:
        return self

    # What is there.

    def exists(self) -> bool:
        return _gfile().exists(self._url)

    def is_dir(self) -> bool:
        return _gfile().isdir(self._url)

    def is_file(self) -> bool:
        return self.exists() and not self.is_dir()

    def stat(self) -> Any:
        return _gfile().stat(self._url)  # .length, as os.stat's st_size

    def size(self) -> int:
        return int(self.stat().length)

    def iterdir(self) -> Iterator[StoragePath]:
        for name in sorted(_gfile().listdir(self._url)):
            child = self / name.rstrip("/")
            # ram:// lists by name prefix: "runs/r" also lists the "runs/r.lock" beside it.
            if not self._url.startswith("ram://") or child.exists():
                yield child

    def files(self) -> list[str]:
        """Every file (object) under this folder, as paths relative to it, sorted."""
        found = []
        for child in self.iterdir():
            if child.is_dir():
                found.extend(f"{child.name}/{name}" for name in child.files())
            else:
                found.append(child.name)
        return sorted(found)

    def glob(self, pattern: str) -> Iterator[StoragePath]:
        """The entries under this folder whose relative path matches ``pattern`` (``*`` does
        not cross ``/``, as in ``pathlib``; ``**`` is not supported)."""
        if "**" in pattern:
            raise ValueError("StoragePath.glob does not support '**'")
        depth = pattern.count("/")
        candidates = [self]
        for _ in range(depth + 1):
            candidates = [child for folder in candidates if folder.is_dir()
                          for child in folder.iterdir()]
        for candidate in candidates:
            if fnmatch.fnmatchcase(candidate.relative_to(self), pattern):
                yield candidate

    # Reading and writing.

    def open(self, mode: str = "r", encoding: str | None = None,
             newline: str | None = None) -> IO[Any]:
        del encoding, newline  # gfile reads and writes UTF-8 text, "\n" as it is
        return _gfile().GFile(self._url, mode)

    def read_bytes(self) -> bytes:
        with said_plainly(self._url), self.open("rb") as f:
            return f.read()

    def read_text(self, encoding: str = "utf-8") -> str:
        return self.read_bytes().decode(encoding)

    def write_bytes(self, data: bytes) -> int:
        """Write the whole object. Object stores (``gs://``, ``s3://``) need no folder for it;
        the other filesystems behind a URL (``file://``, ``ram://``, HDFS) do, and list only
        what is in folders, so there the folder is made first."""
        if not self.in_object_store:
            self.parent.mkdir(parents=True, exist_ok=True)
        if self._url.startswith("ram://"):  # its "w" appends to a file that exists
            self.unlink(missing_ok=True)
        with said_plainly(self._url), self.open("wb") as f:
            f.write(data)
        return len(data)

    def write_text(self, text: str, encoding: str = "utf-8") -> int:
        return self.write_bytes(text.encode(encoding))

    # Changing what is there.

    def mkdir(self, parents: bool = False, exist_ok: bool = False) -> None:
        del parents  # object storage has no folders to make one by one
        if self.exists() and not exist_ok:
            raise FileExistsError(self._url)
        _gfile().makedirs(self._url)

    def unlink(self, missing_ok: bool = False) -> None:
        try:
            _gfile().remove(self._url)
        except FileNotFoundError:
            if not missing_ok:
                raise

    def replace(self, target: str | StoragePath) -> StoragePath:
        """Put this file in ``target``'s place (a copy and a delete in object storage: the
        target object is replaced whole, never seen half-written)."""
        _gfile().rename(self._url, str(target), overwrite=True)
        return StoragePath(target)

    def rename(self, target: str | StoragePath) -> StoragePath:
        return self.replace(target)

    def rmtree(self) -> None:
        if self.exists():
            _gfile().rmtree(self._url)


#: A location asrkit reads or writes: a local path or a URL.
Location = Path | StoragePath


def location(value: str | os.PathLike[str] | StoragePath) -> Location:
    """The location a user's string (or a path) names: a :class:`StoragePath` for a URL,
    else a local ``Path``."""
    if isinstance(value, StoragePath | Path):
        return value
    return StoragePath(as_text(value)) if is_url(value) else Path(value)


def rmtree(path: Location) -> None:
    """Remove a folder and all it holds, local or at a URL."""
    if isinstance(path, StoragePath):
        path.rmtree()
    else:
        import shutil

        shutil.rmtree(path, ignore_errors=True)


class _Gfile:
    """``tf.io.gfile`` with its errors said as Python's: a missing object is a
    ``FileNotFoundError`` (as code written for ``Path`` expects), any other failure a
    :class:`StorageError` of one line."""

    def __getattr__(self, name: str) -> Any:
        import tensorflow as tf

        function = getattr(tf.io.gfile, name)

        def call(*args: Any, **kwargs: Any) -> Any:
            with said_plainly(str(args[0]) if args else ""):
                return function(*args, **kwargs)

        return call


@contextlib.contextmanager
def said_plainly(url: str) -> Iterator[None]:
    """Turn TensorFlow's filesystem errors at ``url`` into Python's: a missing object into
    ``FileNotFoundError``, any other failure into a :class:`StorageError` of one line."""
    import tensorflow as tf

    try:
        yield
    except tf.errors.NotFoundError as error:
        raise FileNotFoundError(2, error.message, url) from None
    except tf.errors.OpError as error:
        raise StorageError(storage_problem(error, url)) from None


def _gfile() -> Any:
    return _Gfile()
