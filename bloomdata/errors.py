"""The one exception type users see, for the whole project (bloomdata, bloomtrain, flows).

A ``BloomstackError`` is a problem with the user's input or environment (a missing file, a bad config
value, a corrupt index). The CLIs print its message on one line and exit with code 2, with no traceback;
the flows turn it into a Failed state carrying the message. So every message must say which file (and
line) or value is wrong and how to fix it. It lives in bloomdata, the bottom layer, so every package can
raise it without importing upward.
"""


from collections.abc import Sequence


class BloomstackError(Exception):
    """A user-facing error: one line naming the culprit and the fix; CLIs exit with code 2.

    Library code names config keys (``out_dir``, ``sources``, ``data.blend``), never the flags of one CLI: a
    flow or a YAML file set the value just as well. ``keys`` lists the dotted keys the message names; a CLI
    prints each as the flag that sets it (``bloomdata.cli.options.ConfigParser.message``), the flows as is."""

    def __init__(self, message: str = "", *, keys: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.keys = tuple(keys)


class ClusterLost(BloomstackError):
    """The Dask scheduler, or every worker of an external one, went away while a job's steps ran
    (``bloomdata.jobs.executor``).

    ``lost``: what went away; ``restart``: what the user starts again before the rerun ("" when nothing)."""

    def __init__(self, lost: str, restart: str, done: str = "") -> None:
        fix = f"{restart}, then rerun the same command" if restart else "rerun the same command"
        super().__init__(f"{lost}{done}: {fix}")
        self.lost, self.restart = lost, restart

    def counting(self, done: int, total: int, what: str = "shards") -> "ClusterLost":
        """The same error saying how much is done (the caller counts its completion markers)."""
        return ClusterLost(self.lost, self.restart, f" with {done} of {total} {what} done (a rerun reuses them)")


class FieldValueError(ValueError):
    """A model validator's check across fields, about one of them. A ``ValueError`` as pydantic expects (the
    config loader turns it into ``FILE:LINE: KEY: message; fix: ...``); ``fields`` (the one at fault first)
    let the loader name ``<section>.<field>`` and its line instead of the whole section: the first of them
    that the highest layer (override, flag, file) set; a dotted name (``languages.zh.min_words``) is a key below
    the field."""

    def __init__(self, message: str, *fields: str) -> None:
        super().__init__(message)
        self.fields = fields
