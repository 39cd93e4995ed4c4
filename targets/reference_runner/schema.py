"""The shape of a reference_runner case, as a JSON Schema: checked before any worker runs it."""

from fuzzrunner.runner.config import DTYPES
from fuzzrunner.runner.model_runner import DUMMY_KINDS


def _int(lo: int, hi: int) -> dict:
    return {"type": "integer", "minimum": lo, "maximum": hi}


ADAPTER_ID = _int(0, (1 << 31) - 1)
REQUEST = {"type": "object", "required": ["adapter_id", "tokens"], "additionalProperties": False,
           "properties": {"adapter_id": ADAPTER_ID, "tokens": {"type": "array", "items": _int(0, (1 << 20) - 1),
                                                                "minItems": 1, "maxItems": 1 << 16}}}
REQUESTS = {"type": "array", "items": REQUEST, "minItems": 1, "maxItems": 4096}
OPS = {
    "add_adapter": {"adapter_id": _int(1, (1 << 31) - 1), "rank": _int(1, 256)},
    "remove_adapter": {"adapter_id": ADAPTER_ID},
    "step": {"requests": REQUESTS},
    "replay": {"requests": REQUESTS},
    "dummy_run": {"num_tokens": _int(1, 1 << 16), "kind": {"enum": list(DUMMY_KINDS)}},
    "capture": {"size": _int(1, 1 << 16)},
}


def _op_rule(name: str, fields: dict) -> dict:
    return {"if": {"properties": {"op": {"const": name}}},
            "then": {"required": list(fields), "properties": fields,
                     "additionalProperties": False, "patternProperties": {"^op$": {}}}}


CONFIG = {
    "type": "object", "additionalProperties": False,
    "properties": {
        "max_loras": _int(1, 64), "max_lora_rank": _int(1, 256), "max_num_tokens": _int(1, 1 << 16),
        "max_num_reqs": _int(1, 1 << 16), "capture_sizes": {"type": "array", "items": _int(1, 1 << 16),
                                                            "maxItems": 64},
        "vocab_size": _int(1, 1 << 20), "hidden_size": _int(4, 4096), "dtype": {"enum": list(DTYPES)},
        "specialize_active_lora": {"type": "boolean"}, "lora_scaling": {"type": "number"},
        "seed": _int(0, (1 << 31) - 1),
    },
}

SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "properties": {
        "config": CONFIG,
        "ops": {"type": "array", "maxItems": 1024, "items": {
            "type": "object", "required": ["op"], "properties": {"op": {"enum": list(OPS)}},
            "allOf": [_op_rule(name, fields) for name, fields in OPS.items()]}},
    },
}
