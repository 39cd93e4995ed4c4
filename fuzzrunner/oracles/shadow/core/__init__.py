"""The core both modes of the shadow oracle share (the CPU mode, ``../oracle.py``, and the device mode,
``../gpu/``, are its back ends): the span record and a bad access (``span.py``), the words of a report
(``words.py``), the reporter that makes them violations (``reporter.py``), the stack of installed hooks
(``hooks.py``) and the oracle's protocol, installing them in one order (``base.py``)."""

from . import words
from .base import ShadowCore
from .hooks import Hooks, exit_mode, insert_mode
from .reporter import Reporter
from .span import NEVER, BadAccess, Span
from .words import describe, describe_sub_buffer

__all__ = ["NEVER", "BadAccess", "Hooks", "Reporter", "ShadowCore", "Span", "describe", "describe_sub_buffer",
           "exit_mode", "insert_mode", "words"]
