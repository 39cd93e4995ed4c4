"""The run's context: decided once from the settings and the machine (``Context.resolve``), a typed error
where its device cannot be had, passed down as a parameter; the environment only a front end's default."""

import os

import pytest

from fuzzrunner import _env, env_defaults, fuzz, names
from fuzzrunner.context import Context, default_shadow
from fuzzrunner.engine import protocol
from fuzzrunner.errors import DeviceUnavailable, InvalidArgument
from fuzzrunner.settings import Settings


def test_nothing_asked_is_this_machines_device_and_a_cluster_decides_its_own_gpus():
    assert Context.resolve(Settings()).device == _env.device_type()
    assert Context.resolve(Settings(device="cpu")) == Context("cpu", True, "cpu")
    assert Context.resolve(Settings(device="cuda"), on_cluster=True) == Context("cuda", False, "device")  # the nodes'
    assert Context.resolve(Settings(sanitizer="initcheck"), on_cluster=True) == Context("cuda", False, "device",
                                                                                        "initcheck")


@pytest.mark.skipif(_env.cuda_present(), reason="needs a machine without a GPU")
def test_a_gpu_that_is_not_here_is_a_device_error_naming_what_asked_for_it():
    with pytest.raises(DeviceUnavailable, match="device 'cuda' needs a CUDA GPU"):
        Context.resolve(Settings(device="cuda"))
    with pytest.raises(DeviceUnavailable, match="compute-sanitizer --tool memcheck needs a CUDA GPU"):
        Context.resolve(Settings(sanitizer="memcheck"))
    with pytest.raises(DeviceUnavailable, match="nothing on the CPU checks what it checks"):
        Context.resolve(Settings(sanitizer="racecheck"))
    with pytest.raises(DeviceUnavailable, match="^--device cuda needs"):
        Context.resolve(Settings(device="cuda"), asked_as="--device cuda")
    assert issubclass(DeviceUnavailable, InvalidArgument)  # the CLI's exit 2, as every bad argument


@pytest.mark.parametrize("device, interpreted, forced, mode", [
    ("cuda", False, None, "device"), ("cpu", True, None, "cpu"), ("cuda", True, None, "cpu"),
    ("cuda", False, "cpu", "cpu"), ("cpu", True, "device", "device")])
def test_the_shadow_mode_is_the_settings_else_the_device_mode_only_with_compiled_triton_on_a_gpu(
        device, interpreted, forced, mode):
    assert Context.of(device, interpreted=interpreted, shadow=forced).shadow == mode
    assert default_shadow(device, interpreted) == ("device" if (device, interpreted) == ("cuda", False) else "cpu")


def test_a_campaigns_workers_interpret_on_the_cpu_and_compile_on_a_gpu_a_replay_here_runs_as_this_process():
    assert Context.resolve(Settings(device="cpu")).interpreted
    assert not Context.resolve(Settings(device="cuda"), on_cluster=True).interpreted
    assert Context.resolve(Settings(device="cpu"), in_process=True).interpreted == _env.interpreted()


def test_the_settings_shadow_mode_is_checked_and_forced():
    assert Context.resolve(Settings(device="cpu", shadow="device")).shadow == "device"
    with pytest.raises(InvalidArgument, match=r"^shadow='gpu' must be one of device, cpu, or None"):
        Settings(shadow="gpu")
    with pytest.raises(InvalidArgument, match="shadow='gpu' must be one of device, cpu"):
        Context("cpu", True, "gpu")
    with pytest.raises(InvalidArgument, match="device='tpu' must be one of cpu, cuda"):
        Context("tpu", True, "cpu")


def test_the_cpu_check_of_a_gpu_campaign_interprets_and_keeps_only_a_forced_shadow_mode():
    assert Context.cpu_check(Settings(device="cuda", sanitizer="initcheck")) == Context("cpu", True, "cpu")
    assert Context.cpu_check(Settings(shadow="device")) == Context("cpu", True, "device")


def test_a_context_travels_to_a_worker_whole_through_its_start_up_environment():
    for context in (Context("cuda", False, "device", "initcheck", "MIG-1234"), Context("cpu", True, "device"),
                    Context("cuda", False, "cpu", gpu="1"), Context.of("cpu")):
        start = protocol.WorkerEnv("my.py:T", context, hub_socket="/tmp/s", parent=42)
        env = start.environ({"FUZZRUNNER_SHADOW": "cpu", "TRITON_INTERPRET": "1", "FUZZRUNNER_SANITIZER": "memcheck"})
        assert protocol.WorkerEnv.read(env) == start  # nothing inherited stands in for the context's fields
        assert env["CUDA_VISIBLE_DEVICES"] == ("" if context.device == "cpu" else context.gpu)


def test_a_context_is_recorded_and_read_back_and_an_unreadable_record_is_none():
    c = Context("cuda", False, "device", "initcheck", "0")
    assert Context.from_dict(c.to_dict()) == c
    for bad in (None, [], {"device": "tpu", "shadow": "cpu"}, {"device": "cpu"}, {"device": "cpu", "shadow": "x"}):
        assert Context.from_dict(bad) is None
    assert Context.from_dict({"device": "cpu", "shadow": "cpu"}) == Context("cpu", True, "cpu")


def test_the_environment_is_a_front_ends_default_that_explicit_settings_override(monkeypatch):
    monkeypatch.setenv("FUZZRUNNER_SHADOW", "device")
    assert env_defaults.apply(Settings()) == Settings(shadow="device")
    assert env_defaults.apply(Settings(device="cuda", shadow="cpu")) == Settings(device="cuda", shadow="cpu")
    assert Context.resolve(Settings()).shadow == default_shadow(_env.device_type(), _env.device_type() != "cuda")


def test_use_device_is_undone_by_restore_device():
    before = os.environ.get(env_defaults.DEVICE_ENV)
    old = env_defaults.use_device("cpu")
    assert os.environ[env_defaults.DEVICE_ENV] == "cpu" and old == before
    env_defaults.restore_device(old)
    assert os.environ.get(env_defaults.DEVICE_ENV) == before


def test_every_oracle_factory_that_asks_for_the_context_gets_it_and_one_that_does_not_is_called_bare(monkeypatch):
    import sys
    import types
    seen = []
    module = types.ModuleType("fuzzrunner_test_context_oracles")
    module.asks = lambda context: seen.append(context) or "made"        # type: ignore[attr-defined]
    module.Bare = type("Bare", (), {})                                    # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, module.__name__, module)
    context = Context.of("cpu", shadow="device")
    assert names.OracleSpec("asks", f"{module.__name__}:asks").make(context) == "made" and seen == [context]
    assert type(names.OracleSpec("bare", f"{module.__name__}:Bare").make(context)) is module.Bare


def test_fuzz_takes_a_settings_or_a_profile_never_both():
    with pytest.raises(InvalidArgument, match="pass one of the two"):
        fuzz("reference_runner", settings=Settings(), profile="ci")
    with pytest.raises(InvalidArgument, match="takes a fuzzrunner.Settings, not dict"):
        fuzz("reference_runner", settings={"max_examples": 5})


def test_a_targets_strategy_gets_the_runs_device_when_its_cases_take_it_and_old_cases_work_as_before():
    from hypothesis import strategies as st

    from fuzzrunner.case import Case
    from fuzzrunner.target import Target
    asked = []

    def new(faults, *, max_ops, device):
        asked.append(device)
        return st.just(Case("t", {}, ()))

    def old(faults, *, max_ops):  # a user's target from before: cases(faults, *, max_ops)
        asked.append("old")
        return st.just(Case("t", {}, ()))
    for cases in (new, old):
        Target("t", "", cases=cases, run=lambda case, ctx: None).strategy((), 4, device="cpu")
    assert asked == ["cpu", "old"]


def test_vllm_lora_draws_bfloat16_only_where_triton_runs_compiled():
    """Its dtypes once came from the process's environment (FUZZRUNNER_DEVICE, which the CLI set so that the
    strategy could read it): a library campaign with Settings(device="cpu") on a GPU machine drew bfloat16, which
    Triton's interpreter computes wrongly."""
    from fuzzrunner.targets.vllm_lora.cases import vllm_lora_cases
    from hypothesis import HealthCheck, given, settings

    from fuzzrunner.target import Target
    seen: dict = {"cpu": set(), "cuda": set()}
    for device, dtypes in seen.items():
        strategy = Target("vllm_lora", "", cases=vllm_lora_cases, run=lambda case, ctx: None).strategy(
            (), 2, device=device)

        @settings(max_examples=40, database=None, deadline=None, derandomize=True,
                  suppress_health_check=list(HealthCheck))
        @given(strategy)
        def draw(case):
            dtypes.add(case.config["dtype"])  # noqa: B023 - called at once, in this iteration
        draw()
    assert seen == {"cpu": {"float16"}, "cuda": {"float16", "bfloat16"}}


@pytest.mark.parametrize("device", [None, "cpu"])
@pytest.mark.parametrize("forced", ["", "cpu", "device"])
def test_a_replay_here_and_an_isolated_one_resolve_the_same_context(monkeypatch, device, forced):
    """``fuzzrunner.replay`` in this process and in a worker (``Replayer``, as ``fuzzrunner replay`` and the
    pytest plugin's corpus items run it) decide the device and the shadow mode by one rule: in-process replay
    once never resolved its device, and ``device="cpu"`` with the device mode checked the GPU's memory."""
    from fuzzrunner import api
    from fuzzrunner.case import Case
    from fuzzrunner.engine.replay import Replayer
    monkeypatch.setenv("FUZZRUNNER_SHADOW", forced)
    seen = {}
    monkeypatch.setattr(api, "run_case", lambda case, target, *, context, oracles: seen.setdefault("here", context)
                        and [])
    monkeypatch.setattr(Replayer, "run", lambda self, case, spec, timeout_s=None: seen.setdefault(
        "isolated", self.context) and [])
    case = Case("reference_runner", {"max_loras": 1, "capture_sizes": [1]}, [])
    api.replay(case, device=device)
    api.replay(case, device=device, isolated=True)
    here, isolated = seen["here"], seen["isolated"]
    assert here.device == isolated.device == (device or _env.device_type())
    assert here.shadow == isolated.shadow == (forced or default_shadow(here.device, here.interpreted))
    assert isolated.interpreted == (isolated.device != "cuda") and here.interpreted == _env.interpreted()
