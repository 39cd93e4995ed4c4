"""The shape of a lora_kernels case, as a JSON Schema: checked before any worker runs it."""


def _int(lo: int, hi: int) -> dict:
    return {"type": "integer", "minimum": lo, "maximum": hi}


SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "properties": {
        "config": {
            "type": "object", "additionalProperties": False,
            "required": ["max_loras", "max_num_tokens", "hidden", "rank", "slices", "dtype"],
            "properties": {
                "max_loras": _int(1, 64), "max_num_tokens": _int(1, 4096), "hidden": _int(1, 4096),
                "rank": _int(1, 256), "slices": {"type": "array", "items": _int(1, 4096), "minItems": 1,
                                                 "maxItems": 8},
                "dtype": {"enum": ["float32", "float16", "bfloat16"]},
            },
        },
        "ops": {"type": "array", "maxItems": 1024, "items": {
            "type": "object", "additionalProperties": False, "required": ["op", "kernel", "slots"],
            "properties": {
                "op": {"const": "launch"}, "kernel": {"enum": ["shrink", "expand", "bgmv"]},
                "slots": {"type": "array", "items": _int(-1, 63), "maxItems": 4096},
                "pad": _int(0, 4096), "seed": _int(0, (1 << 31) - 1),
            },
        }},
    },
}
