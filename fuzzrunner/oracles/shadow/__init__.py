"""The shadow-memory oracle and its parts: uninitialized, stale and out-of-bounds accesses.

``oracle.py`` is the oracle; ``memory.py`` the shadow (the epoch of each byte's last write) and
``report.py`` its words; the hooks that feed it are ``triton_hook.py`` (Triton's interpreter),
``torch_hook.py`` with ``torch_effects.py`` and ``torch_fallback.py`` (aten ops, custom ops),
``storage_hook.py``, ``host_views.py`` (numpy views and lists), ``threads.py`` (other Python
threads), ``compiled.py`` (``torch.compile``); bounds of views and sub-buffers are
``launch_views.py`` and ``sub_buffers.py``; ``locations.py`` names the user's line.
"""

from .oracle import ShadowOracle

__all__ = ["ShadowOracle"]
