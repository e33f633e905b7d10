"""The one reader every JSON and XML annotation file goes through on its way to a parser.

ijson (yajl) and expat re-scan a token that spans their reads each time more bytes arrive,
so one long string costs the square of its length: with their own reads (64 KB and 16 KB) a
64 MB COCO string took minutes. A reader here hands the parser chunks of 1 MB, or as long as
the token still open at the last one ends (so a token's re-scans add up to a few times its
length: 64 MB cost ijson 0.9 s, 32 MB expat 0.7 s), and, before the parser sees a chunk,
checks it in one pass at C speed (a regex, a lookup table and numpy; no loop per byte):

- JSON (`JsonReader`): UTF-8; nesting depth (ijson's prefix tracking costs the square of
  the depth: 60,000 brackets in 123 KB took it 23 GB); the length of every string and of
  every bare token (a number or literal: a 5000-digit integer would otherwise reach
  Python's int conversion limit);
- XML (`XmlReader`): the distance between consecutive `<`, which bounds every tag,
  attribute value and text run (none may hold an unescaped `<`; a `<` inside a comment or
  CDATA section only shortens the stretch it is in).

A UTF-8 byte order mark at the start of a JSON file (Windows tools write one; RFC 8259 lets a
parser ignore it) is skipped: `JsonReader` never hands it on, and `skip_bom` moves a raw
stream past it for a parser that reads the file itself (COCO's ijson passes). yajl took it
for "lexical error: invalid char in json text".

Over a cap is a `TextLimitError` naming the file, the cap and the byte offset; a parser
never holds more than one capped token. `bounded_entries` builds the entries of a JSON
stream (Label Studio tasks, labelme files) from ijson's events with a budget of values, so a
task of a million results is an `Oversized` marker, not gigabytes of Python objects.
"""

from __future__ import annotations

import codecs
import dataclasses
import re
from collections.abc import Iterable, Iterator
from typing import IO, Any

import ijson
import numpy as np

from transforms.limits import DEFAULT_LIMITS, InputLimits

CHUNK_BYTES = 1 << 20
SCAN_BYTES = 1 << 17  # one numpy pass of the check
_ESCAPE = re.compile(rb"\\.", re.DOTALL)
# A \uD800-\uDFFF escape where an escape starts (after an even run of backslashes), with
# the low half that may follow it: a high half without one, or a low half alone, is half a
# UTF-16 pair. yajl makes `\ud800` a "?" (so "x\ud800" was the label, or file name, "x?"),
# `\ud800\ud800` another character, and raises UnicodeDecodeError on `\udc00`, which
# ended a run with a message naming no file.
_SURROGATE = re.compile(
    rb"(?<!\\)(?:\\\\)*\\u([dD][89a-fA-F][0-9a-fA-F]{2})(\\u[dD][c-fC-F][0-9a-fA-F]{2})?"
)
_ESCAPE_TAIL = 12  # an escaped surrogate pair, `\ud83d\ude00`
_STRING = re.compile(rb'"[^"]*"')  # in unescaped text, where no quote is escaped
_BARE_RUN = re.compile(rb'[^"\[\]{},: \t\r\n]{%d}' % (DEFAULT_LIMITS.number_chars + 1))
_NONE, _QUOTE, _OPEN, _CLOSE, _DELIMITER = 0, 1, 2, 3, 4
_JSON_CLASS = np.zeros(256, np.uint8)
_JSON_CLASS[ord('"')] = _QUOTE
_JSON_CLASS[[ord("["), ord("{")]] = _OPEN
_JSON_CLASS[[ord("]"), ord("}")]] = _CLOSE
_JSON_CLASS[[ord(c) for c in ",: \t\r\n"]] = _DELIMITER
_LESS_THAN = ord("<")
UTF8_BOM = codecs.BOM_UTF8


class TextLimitError(ValueError):
    """Bytes a parser must not be given (not UTF-8, too deep, a token too long); one line.
    `too_large`: over a cap (not: not UTF-8)."""

    def __init__(self, message: str, *, too_large: bool = True) -> None:
        super().__init__(message)
        self.too_large = too_large


class _Reader:
    """A binary stream whose `read` returns the next checked chunk of at most 1 MB."""

    def __init__(self, stream: IO[bytes], source: str) -> None:
        self._stream = stream
        self.source = source
        self.offset = 0  # bytes checked and handed on

    def read(self, size: int = -1) -> bytes:
        if size == 0:  # ijson asks for nothing to learn the stream's type
            return b""
        # The chunk size is ours, not the parser's: at least the open token's length so far.
        chunk = self._first(self._stream.read(max(CHUNK_BYTES, self._open_token())))
        self._check(chunk)
        self.offset += len(chunk)
        return chunk

    def _open_token(self) -> int:
        """Bytes of the token still open at the end of the last chunk (0: none)."""
        return 0

    def _first(self, chunk: bytes) -> bytes:
        """`chunk` as handed on: the first chunk without a JSON file's byte order mark."""
        return chunk

    def drain(self) -> None:
        """Check the whole stream without parsing it."""
        while self.read():
            pass

    def _check(self, chunk: bytes) -> None:
        raise NotImplementedError


class JsonReader(_Reader):
    """JSON bytes for ijson (pass `buf_size=CHUNK_BYTES`), checked as module doc says."""

    def __init__(
        self,
        stream: IO[bytes],
        source: str,
        depth: int,
        limits: InputLimits = DEFAULT_LIMITS,
        *,
        surrogates: bool = True,
    ) -> None:
        super().__init__(stream, source)
        self.surrogates = surrogates  # refuse half a surrogate pair (for ijson's yajl)
        self.depth_limit = depth
        self.string_limit = limits.json_string_bytes
        self.bare_limit = limits.number_chars
        self._decoder = codecs.getincrementaldecoder("utf-8")()
        self._depth = 0
        self._inside = False  # in a string at the end of the last chunk
        self._opened = 0  # where the open string's quote is
        self._bare_from = -1  # the last boundary before the open bare token
        self._escaped_first = False  # the last chunk ended in an escaping backslash
        self._unbalanced = False  # a stray closer: the parser names the syntax error
        self._started = False  # a first chunk was read (and a byte order mark skipped)

    def _first(self, chunk: bytes) -> bytes:
        if self._started:
            return chunk
        self._started = True
        if chunk.startswith(UTF8_BOM):  # offsets stay the file's: messages name its bytes
            self.offset = len(UTF8_BOM)
            return chunk[len(UTF8_BOM) :]
        return chunk

    def _check(self, chunk: bytes) -> None:
        if not chunk:
            try:
                self._decoder.decode(b"", final=True)
            except UnicodeDecodeError:
                raise TextLimitError(
                    f"{self.source}: not UTF-8 text (truncated at the end)", too_large=False
                ) from None
            return
        try:
            self._decoder.decode(chunk)
        except UnicodeDecodeError as error:
            raise TextLimitError(
                f"{self.source}: not UTF-8 text (byte {self.offset + error.start}: {error.reason})",
                too_large=False,
            ) from None
        if self._unbalanced:
            return
        text = self._unescaped(chunk)
        for at in range(0, len(text), SCAN_BYTES):  # numpy's temporaries: a few MB at most
            self._scan(text[at : at + SCAN_BYTES], self.offset + at)
            if self._unbalanced:
                return

    def read(self, size: int = -1) -> bytes:
        if size == 0 or not self.surrogates:
            return super().read(size)
        buffer = bytearray(self._first(self._stream.read(max(CHUNK_BYTES, self._open_token()))))
        # A chunk never ends within an escape's reach of a backslash (but at the stream's
        # end), so each escape, and a pair's low half, is whole in one chunk, and the next
        # chunk starts outside any escape. Held to a string's limit past the chunk: text
        # with a backslash every few bytes for longer (a file of them) is not read whole
        # into memory; there a pair cut at the chunk's end may be judged wrongly (a refusal,
        # or yajl's "?" as before).
        reach = len(buffer) + self.string_limit
        while b"\\" in buffer[-_ESCAPE_TAIL:] and len(buffer) < reach:
            more = self._stream.read(4096)
            if not more:
                break
            buffer += more
        chunk = bytes(buffer)
        del buffer
        self._check(chunk)
        self._check_surrogates(chunk)
        self.offset += len(chunk)
        return chunk

    def _check_surrogates(self, chunk: bytes) -> None:
        if b"\\u" not in chunk:
            return
        for match in _SURROGATE.finditer(chunk):
            if int(match.group(1)[1:2], 16) < 0xC and match.group(2):
                continue  # a high half and its low half: one character
            raise TextLimitError(
                f"{self.source}: the escape \\u{match.group(1).decode()} is half a UTF-16 "
                f"surrogate pair, no character (near byte {self.offset + match.start():,})",
                too_large=False,
            )

    def _open_token(self) -> int:
        return self.offset - self._opened if self._inside else 0

    def _unescaped(self, chunk: bytes) -> bytes:
        """`chunk` with every escape pair replaced by two plain bytes: lengths stay, and an
        escaped quote is no quote."""
        if self._escaped_first:
            chunk = b"_" + chunk[1:]
        text = _ESCAPE.sub(b"__", chunk)
        self._escaped_first = text.endswith(b"\\")  # an odd run: escapes the next byte
        return text

    def _scan(self, text: bytes, start: int) -> None:
        end = start + len(text)
        classes = _JSON_CLASS[np.frombuffer(text, np.uint8)]
        where = np.flatnonzero(classes)
        kinds = classes[where]
        where = where + start
        quotes = kinds == _QUOTE
        # After each mark: odd means inside a string (an opening quote is inside after it).
        inside = (np.cumsum(quotes) + self._inside) % 2 == 1
        self._check_depth(kinds, inside & ~quotes | quotes)
        if self._unbalanced:
            return
        self._check_strings(where[quotes], end)
        self._check_bare(where, inside, end)
        self._inside = bool(inside[-1]) if len(inside) else self._inside

    def _check_depth(self, kinds: np.ndarray, in_string: np.ndarray) -> None:
        steps = np.where(kinds == _OPEN, 1, np.where(kinds == _CLOSE, -1, 0))
        levels = self._depth + np.cumsum(np.where(in_string, 0, steps))
        if not len(levels):
            return
        if int(levels.max()) > self.depth_limit:
            raise TextLimitError(
                f"{self.source}: nested deeper than {self.depth_limit} levels, more than the "
                "format has"
            )
        if int(levels.min()) < 0:
            self._unbalanced = True
        self._depth = int(levels[-1])

    def _check_strings(self, quotes: np.ndarray, end: int) -> None:
        marks = np.concatenate([[self._opened], quotes]) if self._inside else quotes
        closed = len(marks) // 2
        longest = int((marks[1 : 2 * closed : 2] - marks[0 : 2 * closed : 2] - 1).max(initial=0))
        if len(marks) % 2:
            self._opened = int(marks[-1])
            longest = max(longest, end - self._opened - 1)
        if longest > self.string_limit:
            self._refuse(f"a string of more than {self.string_limit:,} bytes")

    def _check_bare(self, where: np.ndarray, inside: np.ndarray, end: int) -> None:
        # A bare token runs from a mark after which the text is outside strings to the next
        # mark (every delimiter is a mark, so nothing else can end it).
        starts = np.concatenate([[self._bare_from], where]) if not self._inside else where
        outside = np.concatenate([[True], ~inside]) if not self._inside else ~inside
        ends = np.concatenate([where[1:] if self._inside else where, [end]])
        gaps = (ends - starts - 1)[outside]
        if len(gaps) and int(gaps.max()) > self.bare_limit:
            self._refuse(f"a number or literal of more than {self.bare_limit} characters")
        if len(where):
            self._bare_from = int(where[-1])

    def _refuse(self, what: str) -> None:
        raise TextLimitError(f"{self.source}: {what} (near byte {self.offset:,})")


class XmlReader(_Reader):
    """XML bytes for an iterparse: no stretch without `<` longer than
    `limits.xml_token_bytes`."""

    def __init__(self, stream: IO[bytes], source: str, limits: InputLimits = DEFAULT_LIMITS):
        super().__init__(stream, source)
        self.limit = limits.xml_token_bytes
        self._last = 0  # where the last '<' is (the file's start before the first)

    def _open_token(self) -> int:
        return self.offset - self._last

    def _check(self, chunk: bytes) -> None:
        marks = np.flatnonzero(np.frombuffer(chunk, np.uint8) == _LESS_THAN) + self.offset
        stretches = np.diff(np.concatenate([[self._last], marks, [self.offset + len(chunk)]]))
        if len(marks):
            self._last = int(marks[-1])
        if int(stretches.max(initial=0)) > self.limit:
            raise TextLimitError(
                f"{self.source}: a tag, attribute or text of more than {self.limit:,} bytes "
                f"(near byte {self.offset:,})"
            )


def skip_bom(stream: IO[bytes]) -> None:
    """Move a seekable `stream`, at its start, past a UTF-8 byte order mark if it has one:
    for a parser that reads the raw file (JsonReader hands on none)."""
    if stream.read(len(UTF8_BOM)) != UTF8_BOM:
        stream.seek(0)


def check_json_bytes(data: bytes, source: str, depth: int) -> None:
    """`check_json` of a text held whole. A short line costs the scan's numpy set-up many
    times its bytes (a million rejects.jsonl lines took minutes), so first a proof in a few
    C passes that no cap can be reached: UTF-8, no longer than a string may be, at most
    `depth` brackets outside strings, no run of bare characters outside strings longer
    than a bare token may be. Whatever that does not prove gets the full scan, so what
    is refused, and its message, is the scan's."""
    if not _plainly_within(data, depth):
        check_json(
            (data[at : at + CHUNK_BYTES] for at in range(0, len(data), CHUNK_BYTES)), source, depth
        )


def _plainly_within(data: bytes, depth: int) -> bool:
    if len(data) > DEFAULT_LIMITS.json_string_bytes:
        return False
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    # The scan's own view: escape pairs made plain, then each string (quote parity, as the
    # scan counts it) emptied; an unclosed string stays, which can only make a run longer.
    outside = _STRING.sub(b'""', _ESCAPE.sub(b"__", data))
    opened = outside.count(b"[") + outside.count(b"{")
    return opened <= depth and _BARE_RUN.search(outside) is None


def check_json(chunks: Iterable[bytes], source: str, depth: int) -> None:
    """TextLimitError naming `source` if the bytes are not UTF-8, nest deeper than `depth` or
    hold a token over the default caps."""
    iterator = iter(chunks)

    class _Chunks:
        def read(self, size: int = -1) -> bytes:  # noqa: ARG002
            return next(iterator, b"")

    # json.loads, which these texts go to, keeps half a pair as it is: its callers say so
    JsonReader(_Chunks(), source, depth, surrogates=False).drain()  # type: ignore[arg-type]


@dataclasses.dataclass(frozen=True)
class Oversized:
    """An entry of more JSON values than its budget: dropped while it streamed past."""

    values: int  # values read before it was dropped (just over the budget)
    fields: dict[str, Any]  # the asked-for scalars seen before then (to name the entry)


_STARTS, _ENDS = ("start_map", "start_array"), ("end_map", "end_array")


def bounded_entries(
    reader: JsonReader,
    prefix: str,
    budget: int,
    *,
    keys: frozenset[str] | None = None,
    fields: tuple[str, ...] = (),
) -> Iterator[Any]:
    """Each value at ijson `prefix` ("item": the items of a top-level list; "": the whole
    document), built from the events with at most `budget` values, else `Oversized`.

    `keys`: of an object entry, only these keys are built (the rest stream past, uncounted).
    `fields`: scalar paths (relative to the entry, e.g. "data.image") kept for `Oversized`.
    """
    builder, depth, count, seen = None, 0, 0, {}
    head = f"{prefix}." if prefix else ""
    wanted = {head + field: field for field in fields}
    build = None
    for path, event, value in ijson.parse(reader, use_float=True, buf_size=CHUNK_BYTES):
        if depth == 0:
            if path != prefix or event in ("map_key", *_ENDS):
                continue
            if event not in _STARTS:
                yield value
                continue
            builder, count, seen = ijson.ObjectBuilder(), 0, {}
            build = builder.event
        if event in _STARTS:
            depth += 1
        elif event in _ENDS:
            depth -= 1
        elif path in wanted and event != "map_key":
            seen[wanted[path]] = value
        if build is not None and (keys is None or _wanted(keys, prefix, path, event, value)):
            count += 1
            build(event, value)
            if count > budget:
                build = None
        if depth == 0:
            yield builder.value if build is not None else Oversized(count, seen)
            builder = build = None


def _wanted(keys: frozenset[str], prefix: str, path: str, event: str, value: Any) -> bool:
    """Whether an entry's event is built: only the values of `keys` (and the entry itself)."""
    if path == prefix:
        return event != "map_key" or value in keys
    relative = path[len(prefix) + 1 :] if prefix else path
    return relative.split(".", 1)[0] in keys
