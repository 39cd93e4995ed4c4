"""ModelRunner equals the float64 ReferenceModel over hand-written step sequences.

Each step is checked as soon as it ran (an adapter removed later must not change what
the reference expects). Dummy runs of every kind must give the no-adapter output.
"""

import pytest
import torch

from fuzzrunner.errors import InvalidArgument, InvalidCase
from fuzzrunner.kernels.torch_ref import tolerance
from fuzzrunner.runner import DUMMY_KINDS, Faults, ModelRunner, ReferenceModel, Request, RunnerConfig
from fuzzrunner.runner.reference_model import adapter_of


def req(adapter_id: int, *token_ids: int) -> Request:
    return Request(adapter_id, tuple(token_ids))


class Session:
    """A runner and its reference; every step and dummy run is compared as it happens."""

    def __init__(self, device, **config):
        self.config = RunnerConfig(**config)
        self.runner = ModelRunner(self.config, device=device)
        self.ref = ReferenceModel(self.config)
        self.rtol, self.atol = tolerance(getattr(torch, self.config.dtype))

    def add(self, *id_rank: tuple[int, int]) -> None:
        for adapter_id, rank in id_rank:
            self.runner.add_adapter(adapter_id, rank)

    @property
    def slots(self) -> list:
        return list(self.runner.adapters.lora_index_to_id)

    def assert_close(self, out, token_adapters, row_adapters) -> None:
        h, logits = self.ref.forward(out.input_ids, token_adapters, out.logits_rows, row_adapters)
        assert out.hidden.shape == (len(out.input_ids), self.config.hidden_size)
        assert out.logits.shape == (len(out.logits_rows), self.config.vocab_size)
        torch.testing.assert_close(out.hidden.cpu().double(), h, rtol=self.rtol, atol=self.atol)
        torch.testing.assert_close(out.logits.cpu().double(), logits, rtol=self.rtol, atol=self.atol)

    def check(self, out):
        reg = self.runner.adapters.registered
        self.assert_close(out, [adapter_of(reg, a) for a in out.token_adapters],
                          [adapter_of(reg, a) for a in out.row_adapters])
        return out

    def step(self, *requests: Request):
        return self.check(self.runner.execute_model(list(requests)))

    def replay(self, *requests: Request):
        return self.check(self.runner.replay(list(requests)))

    def dummy(self, num_tokens: int, kind: str = "warmup"):
        """A dummy run must give the output of zero input ids with no adapter anywhere."""
        out = self.runner.dummy_run(num_tokens, kind)
        assert set(out.input_ids) == {0} and set(out.token_adapters) == {0} and set(out.row_adapters) == {0}
        self.assert_close(out, [None] * len(out.input_ids), [None] * len(out.logits_rows))
        return out


def spy_prepare(runner) -> list:
    """Record every (re)programming of the token metadata (the ``_last_mapping`` shortcut skips it)."""
    calls, meta = [], runner.punica.token_meta
    original = meta.prepare

    def prepare(slots, **kw):
        calls.append(slots.tolist())
        return original(slots, **kw)

    meta.prepare = prepare
    return calls


# -- adapters -------------------------------------------------------------------------------
def test_adapters_added_removed_and_evicted_lru(device):
    s = Session(device, max_loras=2)
    s.add((1, 4), (2, 8), (3, 2))
    s.step(req(1, 1, 2, 3), req(0, 4, 5), req(2, 7))
    assert s.slots == [1, 2]
    s.step(req(3, 1, 2, 3), req(1, 4, 5))  # 2 is least recently used
    assert s.slots == [1, 3]
    s.step(req(2, 9), req(0, 10))  # LRU order is now 3, 1
    assert s.slots == [1, 2]
    s.runner.remove_adapter(1)
    assert s.slots == [None, 2]
    with pytest.raises(InvalidCase, match="never added"):
        s.runner.execute_model([req(1, 5)])
    s.add((1, 8))  # back, at another rank: other weights
    s.step(req(1, 5, 6), req(3, 7), req(0, 8, 9, 10))
    assert s.slots == [1, 3]
    s.add((3, 5))  # replaced while active: its slot is cleared, the next step reloads it
    assert s.slots == [1, None]
    s.step(req(1, 5, 6), req(3, 7), req(0, 8, 9, 10))
    assert s.slots == [1, 3]


def test_single_slot_evicts_every_step(device):
    s = Session(device, max_loras=1, max_lora_rank=4)
    s.add((1, 4), (2, 1))
    for adapter_id in (1, 2, 1, 1, 2):
        s.step(req(adapter_id, 3, 4, 5), req(0, 6))
        assert s.slots == [adapter_id]


def test_adapter_zero_mixed_in_everywhere(device):
    s = Session(device, max_loras=3)
    s.add((1, 8), (2, 1), (3, 3))
    s.step(req(0, 1), req(1, 2, 3), req(0, 4, 5, 6), req(2, 7), req(0, 8), req(3, 9, 10), req(0, 11))
    s.step(req(0, 1, 2, 3, 4, 5, 6, 7))
    s.step(req(3, 63), req(0, 0))


def test_specialized_active_lora_grid(device):
    s = Session(device, max_loras=4, specialize_active_lora=True)
    s.add((1, 2), (2, 4), (3, 8))
    s.step(req(1, 1, 2))  # one active id: grid 1
    s.step(req(0, 1), req(1, 2), req(2, 3), req(3, 4, 5))  # four (with -1): grid 4
    s.step(req(0, 1), req(3, 2))
    s.runner.capture(8)
    s.replay(req(0, 1), req(1, 2), req(2, 3), req(3, 4, 5))


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_precision_runner(device, dtype):
    s = Session(device, dtype=dtype)
    s.add((1, 8), (2, 3))
    s.step(req(1, 1, 2, 3), req(0, 4), req(2, 5, 6))
    s.dummy(3, "dp_idle")
    s.runner.capture(4)
    s.replay(req(2, 7, 8), req(1, 9))


# -- the _last_mapping shortcut ------------------------------------------------------------------
def test_repeated_identical_mapping_skips_reprogramming(device):
    s = Session(device)
    s.add((1, 4), (2, 8))
    calls = spy_prepare(s.runner)
    s.step(req(1, 1, 2), req(2, 3, 4))
    s.step(req(1, 9, 8), req(2, 7, 6))  # other tokens, same adapters: the metadata is reused
    assert len(calls) == 1
    s.step(req(2, 1, 2), req(1, 3, 4))
    assert len(calls) == 2


def test_shortcut_not_taken_when_slots_change_under_the_same_mapping(device):
    s = Session(device, max_loras=2)
    s.add((1, 4), (2, 8))
    calls = spy_prepare(s.runner)
    s.step(req(1, 1, 2), req(2, 3, 4))
    assert s.slots == [1, 2]
    s.runner.remove_adapter(1)
    s.runner.remove_adapter(2)
    s.add((1, 4), (2, 8))
    s.runner.adapters.activate([2])  # as a set_mapping that failed half-way could: 2 takes slot 0
    s.step(req(1, 1, 2), req(2, 3, 4))  # the last mapping again, but the slots swapped
    assert s.slots == [2, 1] and len(calls) == 2
    s.step(req(1, 1, 2), req(2, 3, 4))
    assert len(calls) == 2


def test_repeated_mappings_around_evictions(device):
    s = Session(device, max_loras=2)
    s.add((1, 4), (2, 8), (3, 2))
    calls = spy_prepare(s.runner)
    s.step(req(1, 1, 2, 3))
    s.step(req(2, 1, 2, 3))
    s.step(req(3, 1, 2, 3))  # evicts 1
    s.step(req(3, 4, 5, 6))
    assert len(calls) == 3
    s.step(req(1, 1, 2, 3))  # evicts 2: 1 comes back into the slot 2 had
    assert s.slots == [3, 1]
    s.step(req(1, 1, 2, 3))
    s.step(req(3, 1), req(1, 2))
    assert len(calls) == 5


# -- padding -----------------------------------------------------------------------------------
@pytest.mark.parametrize("num_tokens, padded", [(1, 1), (3, 4), (5, 8), (8, 8), (9, 9), (32, 32)])
def test_padding_to_capture_sizes(device, num_tokens, padded):
    s = Session(device, max_loras=2)
    s.add((1, 4), (2, 8))
    s.step(*[req(1 + i % 2, *range(4)) for i in range(8)])  # 32 tokens: every row written once
    tokens = [(7 * i) % 64 for i in range(num_tokens)]
    out = s.step(req(2, *tokens[: num_tokens // 2]), req(0, *tokens[num_tokens // 2:])) if num_tokens > 1 \
        else s.step(req(2, *tokens))
    assert out.num_tokens_after_padding == padded and out.graph_size is None
    p, V = s.runner.punica, s.config.vocab_size
    # The padded tokens are mapped to "no adapter", not left as the 32-token step wrote them.
    assert p.token_meta.token_lora_mapping[num_tokens:padded].tolist() == [-1] * (padded - num_tokens)
    assert p.embeddings_indices[num_tokens:padded].tolist() == [s.config.max_loras * V] * (padded - num_tokens)


def test_max_num_tokens_and_max_num_reqs(device):
    s = Session(device, max_num_tokens=16, max_num_reqs=4, capture_sizes=(4, 16))
    s.add((1, 8), (2, 2))
    out = s.step(req(1, *range(10)), req(2, 10, 11), req(0, 12), req(2, 13, 14, 15))
    assert out.num_tokens_after_padding == 16


# -- graphs ------------------------------------------------------------------------------------
def test_capture_then_replay_with_different_adapters(device):
    s = Session(device, max_loras=2)
    s.runner.capture(4)  # captured before any adapter exists
    s.runner.capture(8)
    s.add((1, 4), (2, 8), (3, 2))
    out = s.replay(req(1, 1, 2, 3), req(2, 4, 5), req(0, 6))
    assert out.graph_size == 8 and out.num_tokens_after_padding == 8
    out = s.replay(req(3, 1, 2), req(0, 3))  # evicts 1
    assert out.graph_size == 4 and s.slots == [3, 2]
    s.replay(req(0, 1, 2, 3, 4))
    s.replay(req(3, 9), req(2, 8, 7, 6, 5, 4, 3, 2))
    s.dummy(5, "dp_idle")
    s.step(req(1, 1))  # eager between replays
    out = s.replay(req(1, 1, 2, 3), req(3, 4, 5), req(0, 6, 7))
    assert out.graph_size == 8


def test_capture_after_lora_steps(device):
    s = Session(device, max_loras=2)
    s.add((1, 4), (2, 8))
    s.step(req(1, 1, 2, 3), req(2, 4, 5, 6, 7, 8))
    s.runner.capture(8)
    s.replay(req(2, 1), req(1, 2))
    s.replay(req(0, 1, 2, 3, 4, 5, 6, 7, 8))
    s.step(req(1, 1, 2, 3), req(2, 4, 5, 6, 7, 8))


@pytest.mark.gpu
def test_capture_records_a_real_cuda_graph(device):
    if device != "cuda":
        pytest.skip("FUZZRUNNER_DEVICE is not cuda")
    s = Session(device, max_loras=2)
    s.add((1, 4), (2, 8))
    s.runner.capture(8)
    graph = s.runner.graphs.graphs[8]
    assert isinstance(graph.cuda_graph, torch.cuda.CUDAGraph) and graph.decisions == []
    out = s.replay(req(1, 1, 2, 3), req(2, 4, 5), req(0, 6))
    assert out.graph_size == 8
    torch.testing.assert_close(out.hidden, graph.static_output[:6])  # the graph's own buffer


def test_replay_falls_back_to_eager_when_no_graph_fits(device):
    s = Session(device, max_loras=2)
    s.add((1, 4), (2, 8))
    out = s.replay(req(1, 1, 2))  # nothing captured yet
    assert out.graph_size is None and out.num_tokens_after_padding == 2
    s.runner.capture(4)
    out = s.replay(req(1, 1, 2, 3), req(2, 4, 5, 6))
    assert out.graph_size is None and out.num_tokens_after_padding == 8
    out = s.replay(req(2, *range(9)))
    assert out.graph_size is None and out.num_tokens_after_padding == 9
    out = s.replay(req(2, 1), req(1, 2, 3))
    assert out.graph_size == 4


# -- dummy runs --------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", DUMMY_KINDS)
def test_dummy_runs_give_the_no_adapter_output(device, kind):
    s = Session(device, max_loras=2)
    for n in (1, 3, 8):
        s.dummy(n, kind)
    s.add((1, 4), (2, 8))
    s.step(req(1, 1, 2, 3), req(2, 4, 5, 6), req(0, 7, 8))
    for n in (8, 1, 5):
        s.dummy(n, kind)
    s.step(req(1, 1, 2, 3), req(2, 4, 5, 6), req(0, 7, 8))  # reprogrammed after the dummy run
    s.runner.capture(8)
    s.replay(req(2, 9, 10))
    s.dummy(2, kind)


def test_dp_idle_after_lora_steps(device):
    s = Session(device, max_loras=2)
    s.add((1, 4), (2, 8))
    s.step(*[req(1 + i % 2, *range(4 * i, 4 * i + 4)) for i in range(8)])  # 32 tokens
    s.dummy(1, "dp_idle")
    s.step(req(2, 1, 2, 3), req(1, 4, 5, 6, 7, 8))
    s.dummy(8, "dp_idle")
    s.dummy(3, "dp_idle")
    s.dummy(1, "profile")


# -- invalid inputs ------------------------------------------------------------------------------
INVALID = {
    "too many tokens": lambda r: r.execute_model([req(0, *range(33))]),
    "too many tokens in replay": lambda r: r.replay([req(0, *range(33))]),
    "too many requests": lambda r: r.execute_model([req(0, i) for i in range(9)]),
    "no requests": lambda r: r.execute_model([]),
    "a request without tokens": lambda r: r.execute_model([req(0, 1), req(0)]),
    "token id past the vocabulary": lambda r: r.execute_model([req(0, 64)]),
    "negative token id": lambda r: r.execute_model([req(0, -1)]),
    "unknown adapter": lambda r: r.execute_model([req(7, 1)]),
    "too many adapters in a batch": lambda r: r.execute_model([req(1, 1), req(2, 2), req(3, 3)]),
    "too many adapters in a replay": lambda r: r.replay([req(1, 1), req(2, 2), req(3, 3)]),
    "bad dummy kind": lambda r: r.dummy_run(1, "bogus"),
    "dummy run of 0 tokens": lambda r: r.dummy_run(0, "warmup"),
    "dummy run past max_num_tokens": lambda r: r.dummy_run(33, "dp_idle"),
    "capture size not in capture_sizes": lambda r: r.capture(3),
    "capture size past max_num_tokens": lambda r: r.capture(64),
    "adapter id 0": lambda r: r.add_adapter(0, 4),
    "rank 0": lambda r: r.add_adapter(5, 0),
    "rank past max_lora_rank": lambda r: r.add_adapter(5, 9),
    "remove an unknown adapter": lambda r: r.remove_adapter(5),
}


@pytest.mark.parametrize("case", list(INVALID))
def test_invalid_inputs_raise_invalid_case(device, case):
    s = Session(device, max_loras=2)
    s.add((1, 4), (2, 8), (3, 2))
    with pytest.raises(InvalidCase):
        INVALID[case](s.runner)
    s.step(req(1, 1, 2), req(0, 3), req(2, 4))  # the runner still works


@pytest.mark.parametrize("kwargs, quoted", [
    ({"max_loras": 0}, "max_loras=0"),
    ({"max_loras": 65}, "max_loras=65"),
    ({"max_loras": True}, "max_loras=True"),
    ({"max_lora_rank": 2.5}, "max_lora_rank=2.5"),
    ({"max_num_tokens": -4}, "max_num_tokens=-4"),
    ({"max_num_reqs": 64}, "max_num_reqs=64"),
    ({"vocab_size": 0}, "vocab_size=0"),
    ({"hidden_size": 30}, "hidden_size=30"),
    ({"dtype": "float8"}, "dtype='float8'"),
    ({"capture_sizes": (1, 64)}, "=64"),
    ({"capture_sizes": (0, 4)}, "=0"),
])
def test_runner_config_validation_quotes_the_value(kwargs, quoted):
    with pytest.raises(InvalidArgument) as info:
        RunnerConfig(**kwargs)
    assert quoted in str(info.value)


def test_runner_config_round_trips_and_rejects_unknown_fields():
    config = RunnerConfig(max_loras=3, capture_sizes=(8, 2, 2))
    assert config.capture_sizes == (2, 8)
    assert RunnerConfig.from_dict(config.to_dict()) == config
    with pytest.raises(InvalidArgument, match="max_lora"):
        RunnerConfig.from_dict({"max_lora": 3})


def test_faults_from_names_suggests_the_closest_name():
    with pytest.raises(InvalidArgument, match="Did you mean 'dummy_run_skips_mapping'"):
        Faults.from_names(["dummy_run_skip_mapping"])
    with pytest.raises(InvalidArgument, match="Known faults: dummy_run_skips_mapping") as info:
        Faults.from_names(["zzz"])
    assert "Did you mean" not in str(info.value)
    assert Faults.from_names(["padding_not_mapped"]).enabled() == ["padding_not_mapped"]
    assert Faults.from_names(None) == Faults()
    assert set(Faults.describe()) == set(Faults.names())


def test_a_case_breaking_the_schema_in_several_places_names_each_place_on_one_line():
    pytest.importorskip("jsonschema", reason="jsonschema is not installed: case files and reports go unchecked here")
    import json
    from pathlib import Path

    from fuzzrunner.case import Case
    from fuzzrunner.target import load_target
    seed = json.loads((Path(__file__).resolve().parents[2] / "targets/reference_runner/seeds/dummy_run_first.json")
                      .read_text())
    ops = [{"op": "dummy_run", "num_tokens": "one", "kind": "warmup"},
           {"op": "dummy_run", "num_tokens": 1, "kind": "sideways"}]
    with pytest.raises(InvalidCase) as e:
        load_target("reference_runner").check_case(Case("reference_runner", seed["config"], tuple(ops)))
    message = str(e.value)
    assert "\n" not in message and "ops[0]" in message and "ops[1]" in message, message
