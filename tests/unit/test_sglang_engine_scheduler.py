"""``targets/sglang_engine/scheduler.py``'s feature detection: which release's ``Scheduler`` runs SGLang's own admission
loop, by the methods it has (no SGLang import: stand-in classes with the methods' names)."""

from importlib import import_module

scheduler = import_module("fuzzrunner.targets.sglang_engine.scheduler")


def _release(*names):
    return type("Scheduler", (), {n: (lambda self: None) for n in names})


def test_each_release_runs_its_own_name_of_the_lora_admission_check():
    """0.5.12 - 0.5.19 call it ``_can_schedule_lora_req``, 0.5.20+ ``can_schedule_lora_req``: the loop (SGLang's
    ``_get_new_batch_prefill_raw``) calls it by its release's name, so the shape must hold that one."""
    old = _release(*scheduler.SCHED_METHODS, "_can_schedule_lora_req", "init_lora_drainer")
    new = _release(*scheduler.SCHED_METHODS, "can_schedule_lora_req", "send_control_output")
    assert scheduler.admission_name(old) == "_can_schedule_lora_req"
    assert scheduler.admission_name(new) == "can_schedule_lora_req"
    assert "_can_schedule_lora_req" in scheduler.scheduler_methods(old)
    assert "init_lora_drainer" in scheduler.scheduler_methods(old)
    assert "send_control_output" not in scheduler.scheduler_methods(old)  # optional: taken where it exists
    assert scheduler.unsupported(old) == scheduler.unsupported(new) == ""


def test_a_release_without_the_admission_loop_is_refused_with_what_it_lacks():
    """A Scheduler without a method the loop runs is not driven (the target's details and ``doctor`` say why); the
    earlier path (the re-stated loop around SGLang's admission check) takes its steps."""
    pre = _release(*(m for m in scheduler.SCHED_METHODS if m != "_get_new_batch_prefill_raw"))
    why = scheduler.unsupported(pre)
    assert why == ("the release's Scheduler lacks _get_new_batch_prefill_raw, can_schedule_lora_req / "
                   "_can_schedule_lora_req"), why


def test_a_finished_request_is_released_as_its_release_releases_it():
    """0.5.22+ ``release_kv_cache(req, tree, *, checkpoint)`` (a keyword without default: the call must pass it);
    before, ``release_kv_cache(req, tree, is_insert=True)``."""
    calls = []

    def new(req, tree, *, checkpoint):
        calls.append(("new", checkpoint))

    def old(req, tree, is_insert=True):
        calls.append(("old", is_insert))
    scheduler._release(new)("r", "t")
    scheduler._release(old)("r", "t")
    assert calls == [("new", True), ("old", True)]


def test_a_release_whose_loop_calls_the_timeouts_is_refused_with_the_reason():
    """0.5.14 - 0.5.19's loop calls ``_abort_on_waiting_timeout`` / ``_abort_on_running_timeout`` each round, whose
    state the scheduler object does not hold (work left): refused with the reason, not a target error per case."""
    old = _release(*scheduler.SCHED_METHODS, "_can_schedule_lora_req", "_abort_on_waiting_timeout",
                   "_abort_on_running_timeout")
    why = scheduler.unsupported(old)
    assert "_abort_on_waiting_timeout, _abort_on_running_timeout" in why and "0.5.14 - 0.5.19" in why, why


def test_a_release_whose_scheduler_path_does_not_import_says_which_releases_drive_it_in_one_line(monkeypatch):
    """`doctor --engines` on 0.5.11 printed "scheduler: admission loop re-stated (ImportError: cannot import name
    'resolve_forward_inputs' from 'sglang.srt.managers.overlap_utils' (/site/.../overlap_" (the error cut at 160
    characters mid-path); now the releases the path is driven on and the one name this release lacks."""
    import sys
    real = ImportError("cannot import name 'resolve_forward_inputs' from 'sglang.srt.managers.overlap_utils' "
                       "(/opt/sglang-0.5.11/site/sglang/srt/managers/overlap_utils.py)",
                       name="sglang.srt.managers.overlap_utils")
    assert scheduler._lacks(real) == "lacks sglang.srt.managers.overlap_utils.resolve_forward_inputs"
    assert scheduler._lacks(ModuleNotFoundError("No module named 'sglang.srt.runtime_context'",
                                                name="sglang.srt.runtime_context")) == \
        "lacks sglang.srt.runtime_context"
    assert scheduler._lacks(RuntimeError("boom\nmore")) == "fails to import it (RuntimeError: boom)"
    monkeypatch.delenv("FUZZRUNNER_SGLANG_SCHEDULER", raising=False)
    # the path's first import fails, whatever is importable here: with SGLang's submodules already imported by an
    # earlier test in this worker, `sglang` None alone gave an AttributeError (`__path__`), not an ImportError
    for name in [n for n in sys.modules if n.startswith("sglang.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "sglang", None)
    path, why = scheduler.load()
    assert path is None
    import re
    assert re.fullmatch(rf"the scheduler path is driven on SGLang {scheduler.DRIVEN_ON} only: this release lacks "
                        r"sglang[\w.]*", why), why
