"""A request's own ``extra_key``: the user's cache key (``GenerateReqInput.extra_key``), which SGLang's tokenizer
manager hands to the scheduler (``TokenizedGenerateReqInput.extra_key``) and the scheduler to ``Req``, whose
``__init__`` makes the radix key's namespace of it and the request's ``lora_id``:
``extra_key = (extra_key or "") + lora_id`` (``schedule_batch.py:1166`` in 0.5.23, ``:683`` in 0.5.12). The radix
cache then matches a prompt only against prefixes cached under the same string (``RadixKey(token_ids, extra_key)``).

A served step's requests draw a key each (``key[i]``, cases.py): null (none), ``KEY_USER`` (a key several users
share), or ``lora:NAME`` (the string of adapter NAME's current ``lora_id``: what a user who learnt it, or guessed
it, sends). The user's expectation (``step.prefix-cache``, serving.check_prefix): K/V computed under one adapter is
never served to a request of another adapter or of the base model, and a request reuses only what requests of its
own adapter *and* its own key computed. A plain concatenation breaks the first: a base-model request whose key is
an adapter's lora_id is in that adapter's namespace (SGLang #24638; PRs #25214 / #25351, both closed unmerged).
"""

from __future__ import annotations

import re

KEY_USER = "u"        # a user key shared by several requests
LORA_PREFIX = "lora:"  # ``lora:NAME``: the lora_id adapter NAME has when the request is submitted
KEYS = (None, None, KEY_USER)  # the draw's plain choices (cases.py adds ``lora:NAME`` for the case's adapters)

# the key construction of a release's ``Req.__init__``: the user's key and the lora_id joined as plain strings
CONCATENATION = re.compile(r"extra_key\s*=\s*\(\s*extra_key\s+or\s+\"\"\s*\)\s*\+\s*lora_id")


def resolve(key: str | None, session) -> str | None:
    """The string a request sends as its ``extra_key``: ``lora:NAME`` as adapter NAME's current lora_id (the
    registry's, or the session's without the front end; NAME never loaded: the drawn string itself)."""
    if key is None or not key.startswith(LORA_PREFIX):
        return key
    name = key[len(LORA_PREFIX):]
    ref = session.front.registered().get(name) if session.front is not None else session.refs.get(name)
    return ref.lora_id if ref is not None else key


def concatenates(source: str) -> bool:
    """Whether a release's ``schedule_batch.py`` (its text) makes the radix namespace by concatenating the user's
    key and the lora_id (#24638)."""
    return bool(CONCATENATION.search(re.sub(r"#[^\n]*", "", source)))


def aliases_an_adapter(case: dict) -> bool:
    """Whether a case sends a key that names an adapter's lora_id (``lora:NAME``): #24638's precondition."""
    return any(isinstance(k, str) and k.startswith(LORA_PREFIX)
               for op in case.get("ops", ()) for k in op.get("key", ()) or ())


__all__ = ["KEYS", "KEY_USER", "LORA_PREFIX", "aliases_an_adapter", "concatenates", "resolve"]
