"""The exceptions of the xlate package.

The native module raises these classes (it imports this module), with the message the ``xlate``
command line prints after ``xlate: error:``.
"""

from typing import Any, List, Optional


class XlateError(Exception):
    """Any error of the simulator: a bad configuration, a malformed trace, an unreadable file, a
    workload that failed, a simulated machine out of memory, a failed translation check, a
    design asked for what it cannot do.

    Attributes:
        kind: ``"config"``, ``"unknown"``, ``"trace"``, ``"io"``, ``"workload"``,
            ``"out_of_memory"``, ``"check"`` (a translation check failed: a bug),
            ``"unsupported"`` (a design's documented limit) or ``"error"``.
        path: the file at fault (``"io"`` and ``"trace"`` errors), else None.
        name: the workload (``"workload"``) or the unknown name (``"unknown"``), else None.
    """

    kind: str = "error"

    def __init__(
        self,
        message: str,
        *,
        kind: Optional[str] = None,
        path: Optional[str] = None,
        name: Optional[str] = None,
        **info: Any,
    ) -> None:
        super().__init__(message)
        if kind is not None:
            self.kind = kind
        self.path = path
        self.name = name
        for k, v in info.items():
            setattr(self, k, v)

    @property
    def message(self) -> str:
        """The one-line message (as ``str(error)``)."""
        return str(self.args[0]) if self.args else ""


class ConfigError(XlateError, ValueError):
    """A configuration key is unknown, malformed or out of range.

    The message is the CLI's and names the key: ``config key `mmu.l2.entries`: ...``.

    Attributes:
        key: the dotted key at fault (``"mmu.l2.entries"``), or a file name plus key.
    """

    kind = "config"

    def __init__(self, message: str, *, key: Optional[str] = None, **info: Any) -> None:
        super().__init__(message, **info)
        self.key = key


class UnknownNameError(ConfigError):
    """A design, workload, preset or other name that does not exist.

    Attributes:
        what: what kind of name (``"design"``, ``"workload"``, ``"preset"``, ...).
        name: the name given.
        known: the names that exist.
    """

    kind = "unknown"

    def __init__(
        self,
        message: str,
        *,
        what: Optional[str] = None,
        name: Optional[str] = None,
        known: Optional[List[str]] = None,
        **info: Any,
    ) -> None:
        super().__init__(message, name=name, key=what, **info)
        self.what = what
        self.known = list(known or [])


class TraceError(XlateError):
    """A trace file is malformed or truncated.

    Attributes:
        path: the trace file.
        offset: the byte offset (in the decompressed stream) where the problem starts.
    """

    kind = "trace"

    def __init__(self, message: str, *, path: Optional[str] = None, offset: Optional[int] = None, **info: Any) -> None:
        super().__init__(message, path=path, **info)
        self.offset = offset


__all__ = ["XlateError", "ConfigError", "UnknownNameError", "TraceError"]
