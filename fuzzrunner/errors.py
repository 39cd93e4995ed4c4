"""Typed errors. The library raises these and never prints or exits; front ends do."""


class FuzzrunnerError(Exception):
    """Base class: a message a user can act on (value, rule, fix)."""


class InvalidArgument(FuzzrunnerError):
    """A setting, config or option has a value outside its rule."""


class InvalidCase(FuzzrunnerError):
    """A case that no target could run: malformed, newer schema, or inconsistent ops."""


class HarnessError(FuzzrunnerError):
    """The harness broke (a target cannot be set up, every worker dies): not a finding."""


class SanitizerNotFound(HarnessError):
    """compute-sanitizer is missing, or no GPU is there to run it on."""
