"""User mistakes: reported as one line and exit code 2, never as a traceback; and text
from the input (keys, labels, paths) made safe to print on a terminal."""

import argparse
import re
from collections.abc import Iterable

# C0 and C1 controls (escape sequences, carriage returns), line and paragraph separators,
# the bidirectional marks and overrides that reorder what a terminal shows, and lone UTF-16
# surrogates (a JSON \ud800 escape makes one), which a UTF-8 stream cannot write at all.
_CONTROL = re.compile(
    "[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]"
)


def printable(text: str) -> str:
    """`text` with its control characters written as Python escapes (ESC as \\x1b, a line
    break as \\n), so a file name or label cannot recolour, clear or rewrite the terminal,
    and a line stays one line whatever the input held."""
    return _CONTROL.sub(lambda match: match.group().encode("unicode_escape").decode("ascii"), text)


def printable_lines(lines: Iterable[str]) -> str:
    """A multi-line result of ours: each line made printable, joined by line breaks.

    The lines are kept apart until here, so only the breaks between them survive: a path
    or key holding a line break, put into one of them, is escaped like any other control
    character (raw, it would split an error or the summary's `report:` line in two)."""
    return "\n".join(printable(line) for line in lines)


def shortened(text: str, limit: int = 200) -> str:
    """`text` cut in its middle to at most `limit` characters, keeping its start and end
    (a path's root and its last names), so an error naming a 4 KB path stays a line."""
    if len(text) <= limit:
        return text
    keep = (limit - 3) // 2
    return f"{text[:keep]}...{text[-keep:]}"


class UsageError(Exception):
    """A problem the user can fix; the message names the problem and the fix."""


def one_line_errors(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """`parser`, raising UsageError where argparse would print its usage and exit."""

    def error(message: str):
        raise UsageError(message)

    parser.error = error  # type: ignore[method-assign]
    return parser


class RejectLimitError(RuntimeError):
    """More input was rejected than --max_reject_fraction allows: nothing was published."""

    # Beam leaves an exception so marked as it is, instead of appending the step that
    # raised it ("[while running 'Commit/...']"): the message is a whole line for the user.
    _tagged_with_step = True


def usage_error(error: ValueError) -> UsageError:
    """A core error in the command line's words: settings the core names become flags."""
    from transforms.settings_error import SettingError, as_flag

    if isinstance(error, SettingError):
        return UsageError(error.worded(as_flag))
    return UsageError(str(error))
