"""Trainyard's init container: bring a job's code and S3 data into the pod before the learner starts.

Run as `python -c <this file's text>` (see docs/artifacts.md for the environment it reads). It
downloads the code ZIP with the attempt's token, checks its sha256, unpacks it into MODEL_DIR
refusing entries that could escape it or expand past a limit, then performs the S3 downloads of
TRAINYARD_S3_FETCH. Any failure prints one line on stderr and exits non-zero, which fails the init
container and so the job, with that line as the reason. Stdlib only (boto3 just for S3), Python 3.9+.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
import sys
import tempfile
import time
import urllib.error
import urllib.request
import zipfile
import zlib
from typing import IO, Any

TOKEN_HEADER = "X-Trainyard-Artifact-Token"  # noqa: S105 - a header name
DEFAULT_MODEL_DIR = "/trainyard/model"
DEFAULT_MAX_UNPACKED = 1 << 30
CHUNK = 1 << 20
DOWNLOAD_TRIES = 3
DOWNLOAD_TIMEOUT = 60.0
# Small objects are read in one GetObject; large ones through boto3's parallel ranged download, whose
# thread pool costs more than a small object takes to read.
MULTIPART_FROM = 8 << 20
_SEPARATORS = re.compile(r"[\\/]")
_DRIVE = re.compile(r"^[A-Za-z]:")


class FetchError(Exception):
    """A failure to report as the init container's one-line reason."""


def _say(message: str) -> None:
    line = " ".join(message.split())
    print(f"trainyard fetch: {line}", file=sys.stderr, flush=True)


def _brief(text: str, limit: int = 200) -> str:
    """The first line of `text`, at most `limit` characters: what an error may carry into a job's reason."""
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise FetchError(f"{name} must be an integer, got {raw!r}") from None
    if value < 0:
        raise FetchError(f"{name} must not be negative, got {value}")
    return value


def _inside(root: str, path: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def _safe_parts(name: str, what: str) -> list[str]:
    """Split an archive or object name into path parts, refusing anything that could leave its folder."""
    if "\x00" in name:
        raise FetchError(f"{what} {name!r} has a NUL byte in its name")
    if name.startswith(("/", "\\")) or _DRIVE.match(name):
        raise FetchError(f"{what} {name!r} is an absolute path")
    parts = [part for part in _SEPARATORS.split(name) if part not in ("", ".")]
    if ".." in parts:
        raise FetchError(f"{what} {name!r} contains '..'")
    return parts


def _open_new(root: str, parts: list[str], mode: int) -> IO[bytes]:
    """Create the file root/parts for writing, never through a symlink and never outside `root`."""
    parent = os.path.join(root, *parts[:-1])
    if not _inside(root, os.path.realpath(parent)):
        raise FetchError(f"{'/'.join(parts)!r} would be written outside {root}")
    os.makedirs(parent, exist_ok=True)
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0)
    return os.fdopen(os.open(os.path.join(parent, parts[-1]), flags, mode), "wb")


# -- code ------------------------------------------------------------------------------------------


def _download(url: str, token: str, into: IO[bytes]) -> str:
    """Download `url` into `into` with the token header; return the body's sha256 (hex)."""
    delay = 1.0
    for attempt in range(1, DOWNLOAD_TRIES + 1):
        into.seek(0)
        into.truncate()
        digest = hashlib.sha256()
        request = urllib.request.Request(url, headers={TOKEN_HEADER: token})  # noqa: S310 - URL from the platform
        try:
            with urllib.request.urlopen(request, timeout=DOWNLOAD_TIMEOUT) as response:  # noqa: S310
                while True:
                    chunk = response.read(CHUNK)
                    if not chunk:
                        break
                    digest.update(chunk)
                    into.write(chunk)
            return digest.hexdigest()
        except urllib.error.HTTPError as exc:
            problem = f"HTTP {exc.code} {exc.reason}"
            if exc.code < 500 and exc.code != 429:
                hint = " (the attempt's artifact token was refused)" if exc.code in (401, 403) else ""
                raise FetchError(f"code download failed: {problem}{hint}") from None
        except (urllib.error.URLError, OSError) as exc:
            problem = str(getattr(exc, "reason", exc))
        if attempt == DOWNLOAD_TRIES:
            raise FetchError(f"code download failed after {attempt} tries: {problem}")
        time.sleep(delay)
        delay *= 2
    raise AssertionError("unreachable")


def _checked_entries(archive: zipfile.ZipFile, limit: int) -> list[tuple[zipfile.ZipInfo, list[str]]]:
    """Every entry with its safe path parts; refuse the whole archive before anything is written."""
    entries = []
    declared = 0
    for info in archive.infolist():
        parts = _safe_parts(info.filename, "archive entry")
        kind = stat.S_IFMT(info.external_attr >> 16)
        if kind == stat.S_IFLNK:
            raise FetchError(f"archive entry {info.filename!r} is a symbolic link")
        if kind not in (0, stat.S_IFREG, stat.S_IFDIR):
            raise FetchError(f"archive entry {info.filename!r} is not a regular file or folder")
        if info.flag_bits & 0x1:
            raise FetchError(f"archive entry {info.filename!r} is encrypted")
        declared += info.file_size
        if declared > limit:
            raise FetchError(
                f"archive expands past {limit} bytes (TRAINYARD_CODE_MAX_UNPACKED); refusing to unpack it"
            )
        entries.append((info, parts))
    return entries


def _unpack(archive_file: IO[bytes], root: str, limit: int) -> tuple[int, int]:
    """Unpack the ZIP into `root`; return (files, bytes). Sizes are counted as written, not trusted."""
    try:
        archive = zipfile.ZipFile(archive_file)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError):
        raise FetchError("the code archive is not a valid ZIP file") from None
    files = written = 0
    with archive:
        for info, parts in _checked_entries(archive, limit):
            if not parts:
                continue
            if info.is_dir():
                path = os.path.join(root, *parts)
                if not _inside(root, os.path.realpath(path)):
                    raise FetchError(f"archive entry {info.filename!r} would be written outside {root}")
                os.makedirs(path, exist_ok=True)
                continue
            mode = 0o755 if (info.external_attr >> 16) & 0o111 else 0o644
            try:
                with archive.open(info) as source, _open_new(root, parts, mode) as target:
                    while True:
                        chunk = source.read(CHUNK)
                        if not chunk:
                            break
                        written += len(chunk)
                        if written > limit:
                            raise FetchError(
                                f"archive expands past {limit} bytes (TRAINYARD_CODE_MAX_UNPACKED)"
                            )
                        target.write(chunk)
            except (zipfile.BadZipFile, zlib.error, EOFError) as exc:
                raise FetchError(f"archive entry {info.filename!r} is corrupt: {exc}") from None
            except (NotImplementedError, RuntimeError) as exc:
                raise FetchError(f"archive entry {info.filename!r} cannot be unpacked: {exc}") from None
            except OSError as exc:
                raise FetchError(
                    f"cannot write archive entry {info.filename!r}: {exc.strerror or exc}"
                ) from None
            files += 1
    return files, written


def fetch_code(url: str, sha256: str, token: str, model_dir: str, limit: int) -> None:
    """Download, verify and unpack the code ZIP into `model_dir`."""
    if not re.fullmatch(r"[0-9a-fA-F]{64}", sha256):
        raise FetchError("TRAINYARD_CODE_SHA256 must be the code archive's sha256 in hex")
    os.makedirs(model_dir, exist_ok=True)
    root = os.path.realpath(model_dir)
    with tempfile.TemporaryFile(dir=root) as archive_file:
        actual = _download(url, token, archive_file)
        if actual != sha256.lower():
            raise FetchError(f"code archive sha256 mismatch: expected {sha256.lower()}, got {actual}")
        archive_file.seek(0)
        files, size = _unpack(archive_file, root, limit)
    _say(f"unpacked {files} file(s), {size} bytes into {model_dir}")


# -- S3 --------------------------------------------------------------------------------------------


def _credential(item: dict[str, Any], key: str) -> str | None:
    env_name = item.get(key)
    if not env_name:
        return None
    value = os.environ.get(str(env_name))
    if not value:
        raise FetchError(f"s3 fetch of bucket {item.get('bucket')!r}: credential env {env_name} is not set")
    return value


def _s3_one(boto3: Any, exceptions: Any, item: dict[str, Any], page_size: int) -> None:
    bucket, prefix, target = item.get("bucket"), str(item.get("prefix") or ""), item.get("target")
    if not bucket or not target or not str(target).startswith("/"):
        raise FetchError(f"s3 fetch entry needs a bucket and an absolute target: {sorted(item)}")
    where = f"s3://{bucket}/{prefix}"
    s3 = boto3.client(
        "s3",
        endpoint_url=item.get("endpoint") or None,
        region_name=item.get("region") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1",
        aws_access_key_id=_credential(item, "access_key_env"),
        aws_secret_access_key=_credential(item, "secret_key_env"),
    )
    os.makedirs(str(target), exist_ok=True)
    root = os.path.realpath(str(target))
    count = size = 0
    try:
        pages = s3.get_paginator("list_objects_v2").paginate(
            Bucket=bucket, Prefix=prefix, PaginationConfig={"PageSize": page_size or None}
        )
        for page in pages:
            for obj in page.get("Contents") or []:
                key = obj["Key"]
                if key.endswith("/"):
                    continue
                rel = key[len(prefix) :] if key.startswith(prefix) else key
                rel = rel.lstrip("/") or key.rsplit("/", 1)[-1]
                parts = _safe_parts(rel, f"{where}: object")
                if not parts:
                    raise FetchError(f"{where}: object {key!r} has no file name")
                with _open_new(root, parts, 0o644) as out:
                    if int(obj.get("Size") or 0) < MULTIPART_FROM:
                        body = s3.get_object(Bucket=bucket, Key=key)["Body"]
                        while True:
                            chunk = body.read(CHUNK)
                            if not chunk:
                                break
                            out.write(chunk)
                    else:
                        s3.download_fileobj(bucket, key, out)
                count += 1
                size += int(obj.get("Size") or 0)
    except exceptions.ClientError as exc:
        error = exc.response.get("Error") or {}
        code, message = error.get("Code", "error"), error.get("Message", "")
        raise FetchError(f"{where}: {_brief(str(code))}: {_brief(str(message))}") from None
    except exceptions.BotoCoreError as exc:
        # Never the reply itself: a parser error quotes the body it could not read, and the endpoint may be
        # something other than S3 (this message ends up in the job's failure reason).
        if type(exc).__name__ == "ResponseParserError":
            raise FetchError(f"{where}: the endpoint's reply is not an S3 response") from None
        raise FetchError(f"{where}: {_brief(str(exc))}") from None
    except OSError as exc:
        raise FetchError(f"{where}: cannot write into {target}: {exc.strerror or exc}") from None
    _say(f"downloaded {count} object(s), {size} bytes from {where} into {target}")


def fetch_s3(raw: str) -> None:
    """Perform each download of TRAINYARD_S3_FETCH (a JSON list, see docs/artifacts.md)."""
    try:
        items = json.loads(raw)
    except ValueError:
        raise FetchError("TRAINYARD_S3_FETCH is not valid JSON") from None
    if not isinstance(items, list) or not all(isinstance(item, dict) for item in items):
        raise FetchError("TRAINYARD_S3_FETCH must be a JSON list of objects")
    if not items:
        return
    try:
        import boto3
        import botocore.exceptions
    except ImportError:
        raise FetchError("S3 downloads need boto3, which this image does not have") from None
    page_size = _env_int("TRAINYARD_S3_PAGE_SIZE", 0)
    for item in items:
        _s3_one(boto3, botocore.exceptions, item, page_size)


def main() -> int:
    """Run the fetch steps the environment asks for; return the process exit status."""
    env = os.environ
    try:
        model_dir = env.get("MODEL_DIR") or DEFAULT_MODEL_DIR
        url = env.get("TRAINYARD_CODE_URL", "").strip()
        if url:
            fetch_code(
                url,
                env.get("TRAINYARD_CODE_SHA256", "").strip(),
                env.get("TRAINYARD_ARTIFACT_TOKEN", ""),
                model_dir,
                _env_int("TRAINYARD_CODE_MAX_UNPACKED", DEFAULT_MAX_UNPACKED),
            )
        s3 = env.get("TRAINYARD_S3_FETCH", "").strip()
        if s3:
            fetch_s3(s3)
    except FetchError as exc:
        _say(str(exc))
        return 1
    except Exception as exc:
        _say(f"unexpected {type(exc).__name__}: {exc}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
