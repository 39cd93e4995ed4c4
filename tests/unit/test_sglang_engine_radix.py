"""``sglang_engine``'s ``--disable-radix-cache`` knob, without SGLang: the cases draw it both ways on the scheduler
path (only where the release's radix cache is driven), a radix case's served steps share prompt stems across the
base model and adapters, and the prefix-cache oracle (serving.check_prefix) names a reused KV slot another adapter
wrote, stays silent on a slot of the request's own adapter.

Before the knob the scheduler's tree cache was always made disabled (``--disable-radix-cache``): SGLang's prefix
sharing between requests, keyed by each request's LoRA id, never ran."""

import types
from importlib import import_module

import torch
from hypothesis import HealthCheck, Phase, Verbosity, given, settings
from hypothesis import seed as hseed

from fuzzrunner.coverage import features_of

cases = import_module("fuzzrunner.targets.sglang_engine.cases")
serving = import_module("fuzzrunner.targets.sglang_engine.serving")
scheduler = import_module("fuzzrunner.targets.sglang_engine.scheduler")


def _draw(n: int, **kw) -> list:
    seen: list = []

    @settings(max_examples=n, deadline=None, database=None, phases=[Phase.generate], verbosity=Verbosity.quiet,
              suppress_health_check=list(HealthCheck))
    @hseed(0)
    @given(cases.sglang_engine_cases((), max_ops=6, device="cpu", **kw))
    def run(case):
        seen.append(case)
    run()
    return seen


def test_the_scheduler_path_draws_the_radix_cache_both_ways_with_shared_stems_across_adapters():
    drawn = _draw(60, scheduler=True, radix=True)
    radix = [c for c in drawn if c.config["disable_radix_cache"] is False]
    assert radix and len(radix) < len(drawn), [c.config["disable_radix_cache"] for c in drawn]
    shared_across = 0
    for c in drawn:
        steps = [op for op in c.ops if op["op"] == "step"]
        if c.config["disable_radix_cache"]:  # radix off: the case the same draws gave before the knob
            assert not any("stem" in op for op in steps), steps
            continue
        for op in steps:
            assert len(op["stem"]) == len(op["reqs"]) and all(0 <= k <= cases.STEM_MAX for k in op["stem"])
            stemmed = {r for r, k in zip(op["reqs"], op["stem"]) if k}
            shared_across += len(stemmed) >= 2 and None in stemmed  # the base model and an adapter share one
        got = {f for f in features_of(cases.features, c) if f.startswith("radix_cache=")}
        assert got == {"radix_cache=on"}
    assert shared_across, "no step shared a stem between the base model and an adapter"
    assert {"radix_cache=on", "radix_cache=off", "step=shared-prefix"} <= set(
        cases.feature_space(scheduler=True, radix=True))


def test_a_release_whose_radix_cache_is_not_driven_draws_no_radix_knob():
    assert all("disable_radix_cache" not in c.config for c in _draw(10, scheduler=True, radix=False))
    assert all("disable_radix_cache" not in c.config for c in _draw(10, scheduler=False, radix=True))
    assert "radix_cache=on" not in cases.feature_space(scheduler=True)


def test_every_request_of_a_step_starts_with_the_same_stem_tokens():
    stem = serving.stem_tokens(64)
    assert len(stem) == cases.STEM_MAX and stem == serving.stem_tokens(64)  # the same in every step


def _server(writers: dict):
    rows = torch.zeros(4, 16, dtype=torch.int64)
    rows[1, :3] = torch.tensor([7, 8, 9])
    rows[2, :2] = torch.tensor([7, 8])
    return types.SimpleNamespace(req_pool=types.SimpleNamespace(req_to_token=rows), kv_writer=dict(writers),
                                 reused=0, rounds=5)


def _batch(lora_ids: list, prefix_lens: list, rows: list):
    reqs = [types.SimpleNamespace(rid=f"r{i}", lora_id=lid) for i, lid in enumerate(lora_ids)]
    return types.SimpleNamespace(reqs=reqs, prefix_lens=prefix_lens, req_pool_indices=torch.tensor(rows))


def test_the_prefix_oracle_names_the_request_its_adapter_the_slot_and_the_writer():
    server = _server({7: ("request 0 (None) of round 1", None), 8: ("request 0 (None) of round 1", None),
                      9: ("request 2 ('a1') of round 2", "id1")})
    batch = _batch(["id1", None], [3, 2], [1, 2])
    got = serving.check_prefix(server, batch, {"r0": 0, "r1": 1}, ["a1", None])
    # a1's request reuses the base model's slot 7 (the first wrong one only); the base request reuses base slots
    assert got == ["request 0 ('a1', lora_id id1) reuses KV slot 7 written by request 0 (None) of round 1 of another "
                   "adapter (lora_id None)"], got
    assert server.reused == 2


def test_the_prefix_oracle_is_silent_on_a_prefix_of_the_same_adapter_and_names_an_unwritten_slot():
    server = _server({7: ("w", "id1"), 8: ("w", "id1"), 9: ("w", "id1")})
    assert serving.check_prefix(server, _batch(["id1"], [3], [1]), {"r0": 0}, ["a1"]) == []
    assert server.reused == 3
    assert serving.check_prefix(server, _batch(["id1"], [0], [1]), {"r0": 0}, ["a1"]) == []  # no prefix: no check
    server.kv_writer.pop(8)
    assert serving.check_prefix(server, _batch(["id1"], [3], [1]), {"r0": 0}, ["a1"]) == [
        "request 0 ('a1', lora_id id1) reuses KV slot 8 that no forward wrote"]


def test_writes_are_recorded_per_request_from_the_batch_out_cache_loc():
    server = _server({})
    extend = types.SimpleNamespace(is_extend=lambda: True)
    batch = types.SimpleNamespace(reqs=[types.SimpleNamespace(rid="r0", lora_id=None),
                                        types.SimpleNamespace(rid="r1", lora_id="id1")],
                                  out_cache_loc=torch.tensor([3, 4, 5]), extend_lens=[2, 1], forward_mode=extend)
    serving.record_writes(server, batch, {"r0": 0, "r1": 1}, [None, "a1"])
    assert server.kv_writer == {3: ("request 0 (None) of round 5", None), 4: ("request 0 (None) of round 5", None),
                                5: ("request 1 ('a1') of round 5", "id1")}


def test_a_case_without_the_knob_keeps_the_radix_cache_off():
    knobs = scheduler.scheduler_knobs({}, True)
    assert knobs["disable_radix_cache"] is True
    assert scheduler.scheduler_knobs({"disable_radix_cache": False}, True)["disable_radix_cache"] is False
    assert scheduler.scheduler_knobs({"disable_radix_cache": False}, False) == {}


def test_the_fault_is_unavailable_where_the_radix_cache_is_not_driven_and_says_why():
    faults = import_module("fuzzrunner.targets.sglang_engine.scheduler_faults")
    shape = type("Scheduler", (), {"can_schedule_lora_req": lambda self: None})
    off = types.SimpleNamespace(Scheduler=shape, drainer=True, radix_cache=None, results=True,
                                radix_why="its radix cache lacks sglang.srt.mem_cache.radix_cache")
    why = "SGLang 0.5.x's radix cache is not driven: its radix cache lacks sglang.srt.mem_cache.radix_cache"
    assert faults.unavailable(off, "0.5.x") == {"radix_key_without_lora": why, "radix_key_without_extra_key": why}
    on = types.SimpleNamespace(Scheduler=shape, drainer=True, radix_cache=(object, {}), radix_why="", results=True)
    assert faults.unavailable(on, "0.5.x") == {}
