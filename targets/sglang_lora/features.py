"""What an sglang_lora case exercises, from its JSON alone (no SGLang import): coverage features."""

from __future__ import annotations

OPS = ("step", "capture", "replay", "idle", "unload")
FEATURE_SPACE = tuple(
    [f"op={o}" for o in OPS] + ["backend=triton", "backend=csgmv", "overlap=on", "overlap=off"]
    + ["step=decode", "step=extend", "step=no-adapter", "step=mixed", "replay=padded", "replay=several-adapters",
       "replay=more-adapters-than-capture", "replay=after-eager-step", "adapter=evicted-and-reloaded"]
    + [f"max_loras={n}" for n in (2, 3, 4)])


def features(case) -> set:
    c = case.config
    out = {f"backend={c.get('backend')}", f"overlap={'on' if c.get('overlap') else 'off'}",
           f"max_loras={c.get('max_loras')}"}
    graphs: list = []
    eager = False
    seen: set = set()
    for op in case.ops:
        kind = op.get("op")
        out.add(f"op={kind}")
        uids = list(op.get("uids", []))
        if kind == "step":
            eager = True
            out.add(f"step={op.get('mode', 'decode')}")
            if uids and all(u == 0 for u in uids):
                out.add("step=no-adapter")
            if 0 in uids and any(u for u in uids):
                out.add("step=mixed")
        elif kind == "capture":
            graphs.append(op.get("bs", 0))
        elif kind == "replay":
            fits = sorted(g for g in graphs if g >= len(uids))
            if fits and fits[0] > len(uids):
                out.add("replay=padded")
            if len({u for u in uids if u}) > 1:
                out.add("replay=several-adapters")
                out.add("replay=more-adapters-than-capture")
            if eager:
                out.add("replay=after-eager-step")
        elif kind == "unload":
            if op.get("uid") in seen:
                out.add("adapter=evicted-and-reloaded")
        seen |= set(uids)
    return out
