"""SG2, standalone (SGLang only, CPU, no GPU): an adapter marked draining keeps admitting its new requests as long
as each asks at most 1.2 x the tokens its running requests still have to generate, recomputed every round, so under
steady traffic the drain never ends and the starving adapter it drains for waits as long as the traffic lasts.

SGLang's own ``LoRADrainer`` and ``Scheduler.can_schedule_lora_req`` / ``LoRAManager.validate_lora_batch`` (each
called unbound on an object holding exactly what it reads), driven as ``_get_new_batch_prefill_raw`` drives them
each scheduling round: ``update_draining_state(waiting_queue, running_batch.reqs)``, then
``can_schedule_lora_req(req, running_loras)`` per waiting request, then one decode step of the running requests. A
server with ``--max-loras-per-batch 2``, the base model and adapter ``A`` each sending a request of
``max_new_tokens`` 12 every second round, a request for adapter ``B`` waiting from round 1; the drain threshold
1 s, the clock one second a round.

    python repro_sg2_drain_budget_recomputed.py [SGLANG_SITE_DIR] [--new N]   # the folder holding sglang/

Exit 1 while the bug is there (B not admitted within ceil(1.2 x 12) + 1 rounds of starving: the drained adapter
admitted requests all along), 0 once B gets a slot within that. ``--new 11`` (1.2 x 10 < 11: nothing is admitted
while draining) exits 0 on the unpatched code; ``--patched`` applies sg2_drain_budget_recomputed.patch's change
in memory. SGLang is imported by ``sglang_site.py`` (beside this script: an installed SGLang, the folder given, or
the set-up tree). Exit 2 where SGLang does not import or crashes ("could not run", never "bug").
"""

import math
import sys
import types

import sglang_site

ROUNDS = 60


def main(site: str | None, new: int, patched: bool) -> int:
    print(sglang_site.import_sglang(site))
    from sglang.srt.lora import lora_drainer
    from sglang.srt.lora.lora_manager import LoRAManager
    from sglang.srt.managers.scheduler import Scheduler

    # the admission check, by its release's name (``_can_schedule_lora_req`` 0.5.12 - 0.5.19)
    admit = getattr(Scheduler, "can_schedule_lora_req", None) or Scheduler._can_schedule_lora_req
    if patched:
        _patch(lora_drainer)
    clock = types.SimpleNamespace(now=1000.0)
    lora_drainer.time = types.SimpleNamespace(monotonic=lambda: clock.now)

    # LoRAManager.validate_lora_batch reads these (lora_manager.py:427-456 in 0.5.23); no pinned adapter
    refs = {u: types.SimpleNamespace(pinned=False) for u in ("A", "B")}
    mgr = types.SimpleNamespace(max_loras_per_batch=2, num_pinned_loras=0, lora_refs=refs,
                                memory_pool=types.SimpleNamespace(max_loras_per_batch=2))
    mgr.validate_lora_batch = lambda ids: LoRAManager.validate_lora_batch(mgr, ids)
    drainer = lora_drainer.LoRADrainer(2, 1.0)  # Scheduler.init_lora_drainer: max_loras_per_batch, threshold
    sched = types.SimpleNamespace(lora_drainer=drainer, enable_lora_overlap_loading=False,
                                  tp_worker=types.SimpleNamespace(model_runner=types.SimpleNamespace(lora_manager=mgr)))

    def req(rid, lora_id, tokens):
        return types.SimpleNamespace(rid=rid, lora_id=lora_id, output_ids=[],
                                     sampling_params=types.SimpleNamespace(max_new_tokens=tokens),
                                     time_stats=types.SimpleNamespace(wait_queue_entry_time=clock.now))

    waiting, running, marked, admitted_while_draining = [], [], None, 0
    starving = 1 + 1 + 1  # B queued at round 1, waiting more than the 1 s threshold from round 3
    promise = math.ceil(1.2 * new) + 1
    for rnd in range(ROUNDS):
        if rnd % 2 == 0:
            waiting += [req(f"base{rnd}", None, new), req(f"a{rnd}", "A", new)]  # steady traffic
        if rnd == 1:
            waiting.append(req("b", "B", 1))
        running = [r for r in running if len(r.output_ids) < r.sampling_params.max_new_tokens]
        # _get_new_batch_prefill_raw (scheduler.py:4186-4209, 4276-4277 in 0.5.23)
        running_loras = {r.lora_id for r in running}
        drainer.update_draining_state(waiting, running)
        draining = {a: s.is_draining_for for a, s in drainer.adapter_to_stats.items() if s.is_draining_for}
        if draining and marked is None:
            marked = (rnd, draining)
        for r in list(waiting):
            if admit(sched, r, running_loras):
                admitted_while_draining += r.lora_id in draining
                running_loras.add(r.lora_id)
                running.append(r)
                waiting.remove(r)
        if rnd >= 1 and not any(r.rid == "b" for r in waiting):
            print(f"round {rnd}: B admitted, {rnd - starving} rounds after starving (promise: {promise}); "
                  f"drain marked at round {marked[0] if marked else '-'}; {admitted_while_draining} "
                  f"request{'' if admitted_while_draining == 1 else 's'} admitted by the draining adapter")
            return 0 if rnd - starving <= promise else 1
        for r in running:  # one decode step
            r.output_ids.append(0)
        clock.now += 1.0
    print(f"B not admitted in {ROUNDS} rounds ({ROUNDS - starving} after starving; promise: {promise}): the drain "
          f"was marked at round {marked[0] if marked else '-'} ({marked[1] if marked else 'none'}), and the draining "
          f"adapter admitted {admitted_while_draining} requests of {new} tokens since (each within 1.2 x its running "
          f"requests' remaining tokens, recomputed every round)")
    return 1


def _patch(lora_drainer) -> None:
    """sg2_drain_budget_recomputed.patch applied to the module's source, in memory."""
    import pathlib
    import subprocess
    import tempfile
    src = pathlib.Path(lora_drainer.__file__)
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="sg2-")) / "python/sglang/srt/lora"
    tmp.mkdir(parents=True)
    (tmp / "lora_drainer.py").write_text(src.read_text())
    patch = pathlib.Path(__file__).with_name("sg2_drain_budget_recomputed.patch")
    subprocess.run(["patch", "-s", "-p1", "-d", str(tmp.parents[3]), "-i", str(patch)], check=True)
    exec(compile((tmp / "lora_drainer.py").read_text(), str(src), "exec"), lora_drainer.__dict__)


if __name__ == "__main__":
    argv = sys.argv[1:]
    new = int(argv[argv.index("--new") + 1]) if "--new" in argv else 12
    args = [a for i, a in enumerate(argv) if not a.startswith("--") and (i == 0 or argv[i - 1] != "--new")]
    if len(args) > 1:
        print(f"usage: {sys.argv[0]} [SGLANG_SITE_DIR] [--new N] [--patched]  (the folder holding sglang/)",
              file=sys.stderr)
        sys.exit(2)
    sys.exit(sglang_site.exit_code(main, args[0] if args else None, new, "--patched" in argv))
