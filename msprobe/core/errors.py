"""The one exception type for user errors.

Anything the user can fix (a bad path, a malformed dump.json, a wrong flag) raises
:class:`MsprobeError` with a one-line message saying which file, what is wrong and what to do.
The CLI prints it as ``msprobe: error: <message>`` and exits with status 2; it never shows a traceback.
"""


class MsprobeError(Exception):
    """A user-facing error: one clear line, no traceback."""

    exit_code = 2
