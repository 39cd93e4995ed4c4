"""A bug's name: (tool, kind family, kernel or op, tensor, site) and its short, stable id.

The site is the *function* holding the bad access (``source.site``), never its line: a line
shift must not turn a live bug into "fixed". Uninitialized and stale reads of one tensor at one
site are one bug, so they share a family (``names.KINDS``) and an id. ``finding.py`` builds
findings on it; ``violation.py`` names each violation's signature with it.

Two keys: the *access* (``access_id``: tool, kind family, kernel or torch op, tensor; any location
inside those names left out: ``torch.empty@``) is the primary key of a memory error, what the bad
access itself is; the site (and where an automatically tracked buffer was made) is the secondary
key that tells apart two accesses of one kind to one tensor by one op from different functions.
``id`` holds both. When the function holding the access is renamed or moved, or the file holding
it or the buffer's allocation (a target file renamed or moved), the id changes and the access does
not: a stored finding is then matched by its access (``moved_from``: the same access, with the
function holding it or the functions that made its buffers unchanged), so a rename is not a fix.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from . import names, source


@dataclass(frozen=True)
class Signature:
    """tool + kind + kernel (or torch op) + location + tensor + site; never Python frames."""
    tool: str
    kind: str
    kernel: str
    location: str
    tensor: str
    site: str = ""

    @property
    def id(self) -> str:
        return self._id(source.without_lines)

    @property
    def file_id(self) -> str:
        """The id with the locations inside the tensor and kernel names cut to their files: what a
        process that could not name their functions gave (findings written before sites travelled)."""
        return self._id(source.files_only)

    @property
    def access_id(self) -> str:
        """The primary key alone (no site, no file): for memory errors (a bad read or write of a
        tensor); "" for other kinds (a crash or a numeric difference names no access to match by).
        Findings of any release match by it: it is made of the fields they carry."""
        kind = names.KINDS.get(self.kind)
        if kind is None or not kind.memory:
            return ""
        return _digest(("access", self.tool, kind.family, source.no_locations(self.kernel),
                        source.no_locations(self.tensor)))

    def moved_from(self, other: Signature) -> bool:
        """Whether this is ``other``'s bad access at another place: the same access, and either the
        function holding it or the functions that made the buffers it names unchanged. A renamed
        function changes one of them, a renamed or moved file neither; both changed is another bug
        (two automatically tracked buffers read by one op are one access)."""
        access = self.access_id
        return bool(access) and access == other.access_id and (
            self.function() == other.function() or self._makers() == other._makers())

    def function(self) -> str:
        """The function holding the access, without its file ("" if unknown)."""
        return source.function_of(self.site or source.site(self.location))

    def _makers(self) -> tuple[str, str]:
        return source.functions_only(self.kernel), source.functions_only(self.tensor)

    def matches(self, finding_id: str) -> bool:
        """Whether this is the bug ``finding_id`` names (its id, or its file-level id)."""
        return finding_id in (self.id, self.file_id)

    def _id(self, names_in) -> str:
        kind = names.KINDS[self.kind].family if self.kind in names.KINDS else self.kind
        where = self.site or source.site(self.location)
        return _digest((self.tool, kind, names_in(self.kernel), where, names_in(self.tensor)))

    def short(self, where: str | None = None, *, tool: bool = True) -> str:
        """``kind of tensor in kernel at location [tool]``, leaving out what the tool could not name;
        ``where`` replaces the location (a report's site; "" for none), ``tool=False`` drops the tool."""
        at = self.location if where is None else where
        parts = [self.kind] + [f"{word} {value}" for word, value in
                               (("of", self.tensor), ("in", self.kernel), ("at", at)) if value]
        return " ".join(parts) + (f" [{self.tool}]" if tool else "")

    def to_dict(self) -> dict:
        return {"tool": self.tool, "kind": self.kind, "kernel": self.kernel, "location": self.location,
                "tensor": self.tensor, "site": self.site}

    @classmethod
    def from_dict(cls, d: dict) -> Signature:
        return cls(*(str(d.get(k, "")) for k in ("tool", "kind", "kernel", "location", "tensor", "site")))


def _digest(parts: tuple) -> str:
    """The 12 hex digits of an id. surrogatepass: text holding a path with undecodable bytes (a
    non-UTF-8 folder or target file, in a site or an automatically tracked tensor's name) still has an
    id (the access id raised UnicodeEncodeError and lost the finding); any other text hashes as UTF-8."""
    return hashlib.sha1("|".join(parts).encode("utf-8", "surrogatepass")).hexdigest()[:12]
