"""The stateful op-sequence builder: valid cases, a slot model that matches the real adapter manager,
and rules that reach the deep slot states."""

from importlib import import_module

import pytest
from fuzzrunner.targets.reference_runner import TARGET
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fuzzrunner.case import Case
from fuzzrunner.coverage import features_of
from fuzzrunner.errors import InvalidArgument
from fuzzrunner.runner.adapters import AdapterManager
from fuzzrunner.runner.config import RunnerConfig
from fuzzrunner.strategies import AdapterSlots, OpSequence

cases_module = import_module("fuzzrunner.targets.reference_runner.cases")
FAST = settings(max_examples=60, deadline=None, database=None, suppress_health_check=list(HealthCheck))


def _replay_model(case: Case) -> None:
    """Check each op against what the runner accepts, and the model against the real AdapterManager."""
    c = case.config
    cfg = RunnerConfig(max_loras=c["max_loras"], max_lora_rank=c["max_lora_rank"], max_num_tokens=c["max_num_tokens"],
                       max_num_reqs=c["max_num_reqs"], capture_sizes=tuple(c["capture_sizes"]), hidden_size=8,
                       vocab_size=16)
    manager = AdapterManager(cfg, lambda slot, a: None, lambda slot: None)
    model = AdapterSlots(cfg.max_loras, range(1, 7))
    captured = []
    for op in case.ops:
        kind = op["op"]
        if kind == "add_adapter":
            assert 1 <= op["rank"] <= cfg.max_lora_rank
            manager.add(op["adapter_id"], op["rank"])
            model.add(op["adapter_id"])
        elif kind == "remove_adapter":
            manager.remove(op["adapter_id"])  # InvalidCase if it was not live
            model.remove(op["adapter_id"])
        elif kind == "capture":
            assert op["size"] in cfg.capture_sizes
            captured.append(op["size"])
        elif kind in ("step", "replay"):
            ids = [r["adapter_id"] for r in op["requests"]]
            assert 1 <= len(ids) <= cfg.max_num_reqs
            assert sum(len(r["tokens"]) for r in op["requests"]) <= cfg.max_num_tokens
            assert kind == "step" or captured
            manager.activate([a for r in op["requests"] for a in [r["adapter_id"]] * len(r["tokens"])])
            model.activate(ids)
        assert model.table == manager.lora_index_to_id, op
        assert sorted(model.live) == sorted(manager.registered)


@FAST
@given(TARGET.cases((), max_ops=12))
def test_every_generated_case_is_valid_and_the_slot_model_matches_the_adapter_manager(case):
    TARGET.check_case(case)  # the schema
    _replay_model(case)


def test_the_seed_cases_still_fit_the_schema():
    from fuzzrunner.corpus import load_any
    assert len(TARGET.seed_files()) == 5
    for path in TARGET.seed_files():
        TARGET.check_case(load_any(path)[0])


def test_move_adapter_is_enabled_exactly_when_a_reload_moves_a_batch_adapter_and_reaches_the_deep_state():
    s = cases_module.RunnerState(RunnerConfig(max_loras=2))
    s.add(1)
    s.add(2)
    s.activate([1])
    assert s.movable() == []              # 1 sits in slot 0: a reload puts it back there
    s.activate([2])
    assert s.movable() == [(2, 1)]        # 2 in slot 1, 1 (not in the batch) below it
    s.dummy_mapped = True                 # a dummy run since: the next batch is no repeat of the mapping
    assert "move_adapter" not in [r.name for r, _ in cases_module.OPS.enabled(s)]
    s.dummy_mapped = False
    assert "move_adapter" in [r.name for r, _ in cases_module.OPS.enabled(s)]
    s.activate([1, 2])
    assert s.movable() == []              # both in the batch: nothing may be removed
    ops = [{"op": "add_adapter", "adapter_id": 1, "rank": 1}, {"op": "add_adapter", "adapter_id": 2, "rank": 1},
           {"op": "step", "requests": [{"adapter_id": 1, "tokens": [1]}]},
           {"op": "step", "requests": [{"adapter_id": 2, "tokens": [1]}]}]

    @settings(max_examples=10, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(st.data())
    def after(data):  # from this state the builder's move: the same mapping again, 2 now in slot 0
        state = cases_module.RunnerState(RunnerConfig(max_loras=2))
        for a in (1, 2):
            state.add(a)
        for a in (1, 2):
            state.activate([a])
        state.last_requests = ops[3]["requests"]
        more = cases_module.move_adapter(data.draw, state)
        assert [o["op"] for o in more] == ["remove_adapter", "add_adapter", "step"] and more[2] == ops[3]
        case = Case("reference_runner", {"max_loras": 2, "capture_sizes": [1, 2]}, tuple(ops + more))
        assert "slots=moved-between-same-mappings" in features_of(TARGET.features, case)
        assert state.table == [2, None] and not state.churned
    after()


def test_an_op_sequence_draws_only_enabled_rules_runs_initializers_first_and_respects_max_ops():
    seq = OpSequence()

    @seq.initialize
    def start(draw, s):
        s.append("start")
        return {"op": "start"}

    @seq.rule(weight=lambda s: 5)
    def tick(draw, s):
        s.append("tick")
        return [{"op": "tick"}, {"op": "tock"}]

    @seq.rule(precondition=lambda s: False)
    def never(draw, s):
        raise AssertionError("a disabled rule ran")

    @FAST
    @given(seq.ops(list, max_ops=6, go_on_odds=3))
    def check(ops):
        assert ops[0] == {"op": "start"} and 1 <= len(ops) <= 6
        assert all(o["op"] in ("tick", "tock") for o in ops[1:])
    check()
    with pytest.raises(InvalidArgument, match="weight=0 must be an integer from 1 to 100"):
        seq.rule(weight=0)
    with pytest.raises(InvalidArgument, match="needs at least one rule"):
        OpSequence().ops(list)


def test_by_age_lists_the_resident_adapters_least_recently_used_first():
    s = AdapterSlots(slots=2, ids=range(1, 5))
    assert s.by_age() == []
    s.add(1)
    s.add(2)
    s.activate([1])
    s.activate([2])
    assert s.by_age() == [1, 2]
    s.activate([1])                       # 1 used again: 2 is now the one an activation evicts
    assert s.by_age() == [2, 1]
    s.add(3)
    s.activate([3])                       # evicts 2, the least recently used
    assert s.by_age() == [1, 3] and 2 not in s.table
