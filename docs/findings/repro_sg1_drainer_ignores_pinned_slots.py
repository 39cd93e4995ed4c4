"""SG1, standalone (SGLang only, CPU, no GPU): with a pinned adapter loaded, ``--lora-drain-wait-threshold`` never
drains, and a request for another adapter waits as long as the running adapters keep getting requests.

SGLang's own ``LoRADrainer`` and ``Scheduler.can_schedule_lora_req`` / ``LoRAManager.validate_lora_batch`` (each
called unbound on an object holding exactly what it reads), driven as ``_get_new_batch_prefill_raw`` drives them
each scheduling round: ``update_draining_state(waiting_queue, running_batch.reqs)``, then
``can_schedule_lora_req(req, running_loras)`` per waiting request. A server with ``--max-loras-per-batch 3``, one
pinned adapter ``P`` (loaded, idle), requests for the base model and adapter ``A`` arriving every round, a request
for adapter ``B`` waiting; the drain threshold 1 s, the clock one second a round.

    python docs/findings/repro_sg1_drainer_ignores_pinned_slots.py [SGLANG_SITE_DIR]   # the folder holding sglang/
                                                     # (default: this checkout's .cache/sglang/0.5.23/site)

Exit 1 while the bug is there (B never admitted, no adapter ever drained), 0 once B gets a slot within the rounds
the drain promises, 2 if it could not run (SGLang does not import, or crashed). ``--patched`` applies
sg1_drainer_ignores_pinned_slots.patch's change in memory. SGLang is imported by ``sglang_site.py`` (beside
this file): an installed SGLang as the server imports it, a CPU tree of this checkout as fuzzrunner's
``sglang_engine`` target does.
"""

import sys
import types

import sglang_site

ROUNDS = 20
NEW_TOKENS = 5  # each request's max_new_tokens: a running request holds its adapter 5 rounds


def main(site: str | None, patched: bool) -> int:
    print(sglang_site.import_sglang(site))
    from sglang.srt.lora import lora_drainer
    from sglang.srt.lora.lora_manager import LoRAManager
    from sglang.srt.managers.scheduler import Scheduler

    clock = types.SimpleNamespace(now=1000.0)
    lora_drainer.time = types.SimpleNamespace(monotonic=lambda: clock.now)

    # LoRAManager.validate_lora_batch reads these (lora_manager.py:427-456 in 0.5.23)
    refs = {u: types.SimpleNamespace(pinned=(u == "P")) for u in ("P", "A", "B")}
    mgr = types.SimpleNamespace(max_loras_per_batch=3, num_pinned_loras=1, lora_refs=refs,
                                memory_pool=types.SimpleNamespace(max_loras_per_batch=3))
    mgr.validate_lora_batch = lambda ids: LoRAManager.validate_lora_batch(mgr, ids)
    drainer = lora_drainer.LoRADrainer(3, 1.0)  # Scheduler.init_lora_drainer: max_loras_per_batch, threshold
    if patched:
        _patch(drainer, mgr)
    sched = types.SimpleNamespace(lora_drainer=drainer, enable_lora_overlap_loading=False,
                                  tp_worker=types.SimpleNamespace(model_runner=types.SimpleNamespace(lora_manager=mgr)))

    def req(rid, lora_id):
        return types.SimpleNamespace(rid=rid, lora_id=lora_id, output_ids=[],
                                     sampling_params=types.SimpleNamespace(max_new_tokens=NEW_TOKENS),
                                     time_stats=types.SimpleNamespace(wait_queue_entry_time=clock.now))

    waiting, running, drained = [], [], set()
    for rnd in range(ROUNDS):
        waiting += [req(f"base{rnd}", None), req(f"a{rnd}", "A")]  # steady traffic for the base model and A
        if rnd == 1:
            waiting.append(req("b", "B"))  # B arrives once the base model and A run
        running = [r for r in running if len(r.output_ids) < NEW_TOKENS]  # finished requests leave
        # _get_new_batch_prefill_raw (scheduler.py:4186-4209, 4276-4277 in 0.5.23)
        running_loras = {r.lora_id for r in running}
        drainer.update_draining_state(waiting, running)
        drained |= {a for a, s in drainer.adapter_to_stats.items() if s.is_draining_for is not None}
        for r in list(waiting):
            if Scheduler.can_schedule_lora_req(sched, r, running_loras):
                running_loras.add(r.lora_id)
                running.append(r)
                waiting.remove(r)
        if rnd >= 1 and not any(r.rid == "b" for r in waiting):
            print(f"round {rnd}: B admitted (adapters drained so far: {sorted(map(str, drained))})")
            return 0
        for r in running:  # one decode step
            r.output_ids.append(0)
        clock.now += 1.0
    print(f"B waited {ROUNDS} rounds past a 1-round drain threshold and was never admitted; adapters ever marked "
          f"draining: {sorted(map(str, drained)) or 'none'} (the running adapters {{None, A}} are 2 < "
          f"max_loras_per_batch 3 to the drainer, while validate_lora_batch leaves 3 - 1 pinned = 2 slots)")
    return 1


def _patch(drainer, mgr) -> None:
    """The patch's LoRADrainer._update_draining_loras: drain when a starving adapter does not fit beside the
    running ones as the manager counts slots (pinned adapters reserve theirs), not when len(running) reaches
    max_loras_per_batch."""
    original = drainer._update_draining_loras

    def update(running_reqs):
        running = {r.lora_id for r in running_reqs}
        starving = [a for a, s in drainer.adapter_to_stats.items() if s.is_starving(drainer.max_wait_time_secs)]
        if starving and not all(mgr.validate_lora_batch(running | {a}) for a in starving):
            saved, drainer.max_loras_per_batch = drainer.max_loras_per_batch, len(running)
            try:
                return original(running_reqs)
            finally:
                drainer.max_loras_per_batch = saved
        return None
    drainer._update_draining_loras = update


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a != "--patched"]
    if len(args) > 1:
        print(f"usage: {sys.argv[0]} [SGLANG_SITE_DIR] [--patched]  (the folder holding sglang/)", file=sys.stderr)
        sys.exit(2)
    sys.exit(sglang_site.exit_code(main, args[0] if args else None, "--patched" in sys.argv))
