"""User mistakes: reported as one line and exit code 2, never as a traceback."""


class UsageError(Exception):
    """A problem the user can fix; the message names the problem and the fix."""


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
