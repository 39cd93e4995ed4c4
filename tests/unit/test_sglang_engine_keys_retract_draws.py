"""``sglang_engine``'s request keys and retraction, without SGLang: the cases draw a request's own ``extra_key``
(keys.py) in radix cases and a small KV pool with SGLang's retraction test mode (retraction.py) on the scheduler
path; the prefix-cache oracle tells another adapter's K/V from another key's; the KV-pool oracle names a leak; a
campaign labels SGLang #24638 only on a release whose ``Req.__init__`` concatenates the key and the lora_id."""

import types
from importlib import import_module

from test_sglang_engine_radix import _draw  # the same generation-phase draw of sglang_engine's cases

cases = import_module("fuzzrunner.targets.sglang_engine.cases")
serving = import_module("fuzzrunner.targets.sglang_engine.serving")
keys = import_module("fuzzrunner.targets.sglang_engine.keys")
retraction = import_module("fuzzrunner.targets.sglang_engine.retraction")
known = import_module("fuzzrunner.targets.sglang_engine.known")
site = import_module("fuzzrunner.targets.sglang_lora.site")

# Req.__init__'s lines in every release 0.5.5 - 0.5.23 (schedule_batch.py:1164 in 0.5.23), and #25351's way
CONCAT = '''        # Extra key for caller-defined request classification.
        if lora_id is not None:
            extra_key = (
                extra_key or ""
            ) + lora_id  # lora_id is concatenated to the extra key
'''
TAGGED = '''        if lora_id is not None:
            extra_key = compose_prefix_cache_key(extra_key=extra_key, lora_id=lora_id)
'''


def test_radix_cases_draw_user_keys_and_keys_naming_an_adapter_and_small_pools_draw_the_test_mode():
    drawn = _draw(80, scheduler=True, radix=True)
    sent = [k for c in drawn for op in c.ops for k in op.get("key", ())]
    assert keys.KEY_USER in sent and any(isinstance(k, str) and k.startswith(keys.LORA_PREFIX) for k in sent)
    assert all("key" not in op for c in drawn if c.config["disable_radix_cache"] for op in c.ops)
    small = [c for c in drawn if "max_total_tokens" in c.config]
    assert small and len(small) < len(drawn)
    assert all(c.config["max_total_tokens"] >= retraction.least_tokens(c.ops) + min(retraction.HEADROOM)
               for c in small)
    assert {c.config.get("retract_interval") for c in small} > {None}
    assert {"step=user-key", "step=key-names-adapter", "kv_pool=small", "retract=test-mode"} <= set(
        cases.feature_space(scheduler=True, radix=True))
    assert not any("max_total_tokens" in c.config for c in _draw(10, scheduler=False))


def test_a_key_naming_an_adapter_is_sent_as_its_current_lora_id():
    s = types.SimpleNamespace(front=None, refs={"a1": types.SimpleNamespace(lora_id="0002a1")})
    assert [keys.resolve(k, s) for k in (None, "u", "lora:a1", "lora:a7")] == [None, "u", "0002a1", "lora:a7"]


def _server(writers: dict):
    return types.SimpleNamespace(kv_writer=writers, reused=0, req_pool=types.SimpleNamespace(
        req_to_token=__import__("torch").tensor([[0, 1, 2, 0], [3, 4, 5, 0]])))


def test_the_prefix_oracle_tells_another_adapters_kv_from_another_keys_and_passes_the_same_of_both():
    batch = types.SimpleNamespace(reqs=[types.SimpleNamespace(rid="r1", lora_id=None)],
                                  req_pool_indices=__import__("torch").tensor([0]), prefix_lens=[2])
    index, names = {"r1": 1}, ["a0", None]
    own = {0: ("request 0", None, "u"), 1: ("request 0", None, "u")}
    assert serving.check_prefix(_server(own), batch, index, names, {1: "u"}) == []
    [other_key] = serving.check_prefix(_server(own), batch, index, names, {1: None})
    assert "under another extra_key ('u')" in other_key
    adapter = {0: ("request 0 ('a0')", "L0", None), 1: ("request 0 ('a0')", "L0", None)}
    [other] = serving.check_prefix(_server(adapter), batch, index, names, {1: "L0"})
    assert "extra_key 'L0'" in other and "of another adapter (lora_id L0)" in other


def test_the_kv_pool_oracle_names_slots_neither_free_nor_cached_after_every_request_finished():
    def server(free, cached, rows=4):
        return types.SimpleNamespace(
            alloc=types.SimpleNamespace(available_size=lambda: free), radix=True, kv_size=40, max_running=4,
            tree=types.SimpleNamespace(evictable_size=lambda: cached, protected_size=lambda: 0),
            req_pool=types.SimpleNamespace(available_size=lambda: rows))
    assert retraction.check_returned(server(30, 10), {}, ["a0"]) == []
    [leak] = retraction.check_returned(server(18, 0), {0: 2}, ["a0"])
    assert "22 leaked (retracted: request 0 ('a0') x2)" in leak
    assert len(retraction.check_returned(server(18, 0, rows=3), {}, ["a0"])) == 2


def _finding(case: dict, message: str, faults=()) -> dict:
    sig = {"tool": "state", "kind": "state-violation", "kernel": "", "location": "", "tensor": "step.prefix-cache"}
    return {"signature": sig, "violation": dict(sig), "message": message,
            "case": {"target": "sglang_engine", "config": {"backend": "triton"}, "ops": case, "faults": list(faults)},
            "code_under_test": {"engine": "sglang", "release": "has"}}


def test_a_base_request_in_an_adapters_namespace_is_labelled_24638_only_where_the_release_concatenates(
        tmp_path, monkeypatch):
    monkeypatch.setattr(site, "site_dirs", lambda v: (tmp_path / v / "site", tmp_path / v / "deps"))
    for v, text in (("has", CONCAT), ("fixed", TAGGED)):
        f = tmp_path / v / "site" / "sglang" / "srt" / "managers" / "schedule_batch.py"
        f.parent.mkdir(parents=True)
        f.write_text(text)
    assert keys.concatenates(CONCAT) and not keys.concatenates(TAGGED)
    ops = [{"op": "step", "reqs": ["a0", None], "key": [None, "lora:a0"]}]
    msg = "request 1 (None, lora_id None, extra_key 'L') reuses KV slot 1 written by request 0 of another adapter"
    assert known.label(_finding(ops, msg))["id"] == "#24638"
    assert known.label(dict(_finding(ops, msg), code_under_test={"release": "fixed"})) is None
    assert known.label(_finding(ops, msg, faults=["radix_key_without_lora"])) is None
    assert known.label(_finding([{"op": "step", "reqs": ["a0", None], "key": ["u", "u"]}], msg)) is None
