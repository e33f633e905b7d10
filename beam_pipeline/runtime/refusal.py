"""What the runtime refuses: an output folder in use, not segprep's, or behind a link; a
commit journal that is damaged or forged; an input folder that cannot be listed.

A Refusal is a SettingError (transforms/settings_error.py): its message names settings as
`{name}`, and the CLI words them as flags and exits 2, as for any setting that cannot work.
The runtime itself never spells a flag.
"""

from __future__ import annotations

from transforms.settings_error import SettingError


class Refusal(SettingError):
    """The runtime will not go on; nothing was changed."""
