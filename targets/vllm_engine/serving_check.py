"""Whether a ``vllm_engine`` case's serving and prefix-caching parts are ones the target can run (serving_cases.py
says what they are); each rule raises ``InvalidCase`` naming itself."""

from __future__ import annotations

from fuzzrunner.errors import InvalidCase

from .serving_cases import BLOCK_SIZES, STEMS


def config(c: dict) -> None:
    if not isinstance(c.get("serving", False), bool):
        raise InvalidCase(f"serving {c.get('serving')!r}: true or false.")
    p = c.get("prefix_caching")
    if p is not None and not (isinstance(p, dict) and set(p) == {"enabled", "block_size"}
                              and isinstance(p["enabled"], bool) and p["block_size"] in BLOCK_SIZES):
        raise InvalidCase(f"prefix_caching {p!r}: null, or {{'enabled': true or false, 'block_size': one of "
                          f"{BLOCK_SIZES}}}.")


def op(c: dict, i: int, op: dict) -> None:
    if not c.get("serving"):
        raise InvalidCase(f"op {i}: {op['op']} needs the config's serving: true.")
    if not isinstance(op.get("name"), str) or not op["name"]:
        raise InvalidCase(f"op {i}: {op['op']} names an adapter: a non-empty 'name'.")
    if op["op"] == "serve_load" and (str(op.get("adapter")) not in c["adapters"]
                                     or not isinstance(op.get("inplace"), bool)):
        raise InvalidCase(f"op {i}: serve_load loads config adapter 'adapter' ({', '.join(c['adapters'])}) with "
                          f"'inplace' true or false.")


def request(c: dict, i: int, r: dict) -> None:
    if "model" in r and (not c.get("serving") or not isinstance(r["model"], str) or not r.get("lora")):
        raise InvalidCase(f"op {i}: request {r['id']!r} names model {r['model']!r}: a served name (a string), in a "
                          f"serving case, with 'lora' the adapter it expects.")
    if "stem" in r and not (c.get("prefix_caching") and r["stem"] in range(STEMS)):
        raise InvalidCase(f"op {i}: request {r['id']!r}: stem {r['stem']!r} is 0..{STEMS - 1}, in a prefix-caching "
                          f"case.")
