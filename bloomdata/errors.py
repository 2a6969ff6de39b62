"""The one exception type users see.

A ``BloomDataError`` is a problem with the user's input or environment (a missing file, a bad
config value, a corrupt index). The CLIs print its message on one line and exit with code 2, with no
traceback, so every message must say which file or value is wrong and how to fix it.
"""


class BloomDataError(Exception):
    """A user-facing error: one line naming the culprit and the fix; CLIs exit with code 2."""
