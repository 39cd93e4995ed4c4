"""Typed errors. The library raises these and never prints or exits; front ends do."""


class FuzzrunnerError(Exception):
    """Base class: a message a user can act on (value, rule, fix)."""


class InvalidArgument(FuzzrunnerError):
    """A setting, config or option has a value outside its rule."""


class DeviceUnavailable(InvalidArgument):
    """The device asked for cannot be had here (no GPU for ``cuda`` or a sanitizer): the CLI exits 2
    with it, the pytest plugin skips with it (``fuzzrunner.context.Context.resolve``)."""


class InvalidCase(FuzzrunnerError):
    """A case that no target could run: malformed, newer schema, or inconsistent ops."""


class NewerSchema(InvalidCase):
    """A file written by a newer fuzzrunner: not broken, so never quarantined (a teammate's corpus)."""


class UnregisteredKind(NewerSchema):
    """A finding whose violation kind this process has not registered (a plug-in's, or a newer release's):
    not broken, so never quarantined; the message says what is missing."""


class UnsupportedCase(InvalidCase):
    """A well-formed case that this release of the code under test, or this environment, cannot run (a backend, a
    knob, a runner or a device the release does not ship): not broken, so never quarantined. A campaign keeps it in
    the corpus and skips it, counted (``unsupported`` in the report), so a later campaign on a release that runs it
    still replays it. A target raises it where the refusal is about the release, ``InvalidCase`` where it is about
    the case."""


class SkippedFile(InvalidCase):
    """Not a regular file (a FIFO, a device, a folder), a symlink loop, or too big: never read, never
    quarantined, left where it is (fuzzrunner.safe_io)."""


class UnreadableFile(InvalidCase):
    """A file that could not be opened or read (no permission, an I/O error): what is wrong is the file's access,
    not its contents (a malformed file is a plain ``InvalidCase``)."""


class HarnessError(FuzzrunnerError):
    """The harness broke (a target cannot be set up, every worker dies): not a finding."""


class TargetError(HarnessError):
    """The target's own code failed outside ``run`` (its ``cases()``, its strategy): the target's bug,
    named as the target's, not fuzzrunner's internal error and not a finding."""


class SanitizerNotFound(HarnessError):
    """compute-sanitizer is missing, or no GPU is there to run it on."""


def did_you_mean(name: str, choices) -> str:
    """' Did you mean X?' for the closest of ``choices`` (fuzzy, prefix or substring), else ''."""
    import difflib
    choices = list(choices)
    close = difflib.get_close_matches(name, choices, n=1, cutoff=0.5)
    if not close:
        key = name.lower().replace("-", "_")
        close = [c for c in choices if c.startswith(key) or key in c] or \
            [c for c in choices if c.startswith(key.split("_")[0])]
    return f" Did you mean {close[0]!r}?" if close else ""


class TargetUnavailable(HarnessError):
    """A built-in target whose software is not installed here (the message says how to install it)."""
