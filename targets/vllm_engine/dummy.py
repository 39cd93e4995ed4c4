"""The V2 model runner's dummy runs as the installed release does them (``api.protocol``, read from its source by
``targets.vllm_lora.api.runner_protocol``; docs/vllm.md, "Versions: API generations").

* ``lora_warmup`` (0.24 and later, #35536): ``_dummy_run`` wraps its forward in the mixin's
  ``maybe_dummy_run_with_lora(..., remove_lora=True, num_active_loras=max_loras)``: dummy adapters ids
  1..max_loras, then every adapter removed (runner.py does this: vLLM's own mixin).
* ``zero_mapping`` (0.22 - 0.23, #43139): ``_dummy_run`` registers nothing and removes nothing: it programs a
  no-LoRA mapping over the padded tokens through ``set_adapter_mapping`` and then forces every kernel
  metadata's ``no_lora_flag_cpu = False`` and ``num_active_loras_cpu = 1`` (re-stated here in six lines: they are
  inline code of ``GPUModelRunner.execute_model``, a class that needs a GPU to build). The warm-up's dummy
  adapters are registered at start-up only, by ``capture_model``'s ``maybe_setup_dummy_loras`` (vLLM's mixin).

* ``no_mapping`` (0.15 - 0.21): ``_dummy_run`` programs nothing (``# FIXME(woosuk): Fix warmup for LoRA.``): the
  layers run on whatever the last step left, or on never-written buffers at start-up: V0
  (docs/findings/v0-v2-runner-dummy-run-no-mapping.md, fixed by #43139 in 0.22). The warm-up's dummy adapters
  are registered at start-up only, by ``capture_model``, as in ``zero_mapping``.

Driving the ``lora_warmup`` protocol on a ``zero_mapping`` release would make the target report what that
release's V2 runner never does (E1: a runtime dummy run evicting real adapters): target misuse.
"""

from __future__ import annotations

OWN = ("zero_mapping", "no_mapping")  # the protocols this module runs; lora_warmup is runner.py's mixin call


def zero_mapping(session, num_tokens: int, num_reqs: int) -> None:
    """0.22's ``execute_model(dummy_run=True)``: a zero mapping over ``num_tokens`` rows, then the flags forced."""
    from vllm.lora.layers import LoRAMapping
    manager = session.runner.lora_manager._adapter_manager
    manager.set_adapter_mapping(LoRAMapping(index_mapping=(0,) * num_tokens, prompt_mapping=(0,) * num_reqs,
                                            is_prefill=True))
    seen: set[int] = set()
    for wrapper in manager.punica_wrapper_mapping.values():
        if id(wrapper) in seen:
            continue
        seen.add(id(wrapper))
        for meta in (wrapper.token_mapping_meta, wrapper.prompt_mapping_meta):
            meta.no_lora_flag_cpu[0] = False
            meta.num_active_loras_cpu[0] = 1


def runtime(session, num_tokens: int, num_reqs: int) -> None:
    """What a runtime dummy run of ``num_tokens`` padded rows programs before its forward (``OWN`` protocols)."""
    if session.found["api"].protocol == "zero_mapping":
        zero_mapping(session, num_tokens, num_reqs)


def startup(session) -> None:
    """An ``OWN`` release's start-up as far as LoRA goes: the profile run (``runtime`` over
    ``max_num_batched_tokens``, its forward left out as in runner.py), then ``capture_model``'s ``with
    self.maybe_setup_dummy_loras(self.lora_config)`` (dummy adapters registered, then every adapter removed):
    here with no graph, or, in a session that captures graphs (``CAPTURES``: v2_graphs.py), left to its own
    ``capture_model``, which captures inside it."""
    c = session.c
    runtime(session, c["max_num_batched_tokens"], min(c["max_num_batched_tokens"], c["max_num_seqs"]))
    if getattr(session, "CAPTURES", False):
        return
    with session.runner.maybe_setup_dummy_loras(session.cfg.lora_config):
        pass
