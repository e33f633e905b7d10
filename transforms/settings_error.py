"""A setting that cannot work, named so that each caller words it in its own terms.

The core never spells a command-line flag: a message names settings as `{name}` and the
caller decides how a name reads (the CLI: `--name`; a library user: the plain name).
"""

from __future__ import annotations

import re
from collections.abc import Callable

_NAME = re.compile(r"\{([a-z][a-z0-9_]*)\}")


class SettingError(ValueError):
    """`template` names settings as {name}; str() gives the plain names."""

    def __init__(self, template: str) -> None:
        self.template = template
        super().__init__(self.worded(lambda name: name))

    @property
    def settings(self) -> tuple[str, ...]:
        """The settings the message names, in order."""
        return tuple(dict.fromkeys(_NAME.findall(self.template)))

    def worded(self, name_of: Callable[[str], str]) -> str:
        return _NAME.sub(lambda match: name_of(match[1]), self.template)


def as_flag(name: str) -> str:
    """How the command line spells a setting."""
    return f"--{name}"
