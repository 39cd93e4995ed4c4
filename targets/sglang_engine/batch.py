"""A step's batch as SGLang's own ``ForwardBatch``, and the logits of its forward through SGLang's own
``LogitsProcessor``.

``forward_batch`` builds the release's ``ForwardBatch`` dataclass (not a record of the target's) with the fields
``ForwardBatch.init_new`` sets from the scheduler's batch for a decode or extend batch without a KV cache of
interest: the requests' ``lora_ids``, the extend lengths (prefix 0), the logprob fields the scheduler fills for
requests that ask for input logprobs (``return_logprob``, ``extend_logprob_start_lens_cpu``, ``top_logprobs_nums``,
``token_ids_logprobs``, ``extend_input_logprob_token_ids_gpu``); a field the release's class lacks is dropped,
never invented. ``init_new`` itself is not called: it needs the scheduler's ``ScheduleBatch`` of ``Req`` objects
with KV-cache state (``req_to_token_pool``, the allocator, the radix tree) and a model runner's KV index
translator (docs/sglang.md, "sglang_engine").

``Logits`` is SGLang's ``LogitsProcessor(config)`` called as the model's ``forward`` calls it
(``self.logits_processor(input_ids, hidden_states, self.lm_head, forward_batch)``): the last token per request of
an extend batch, the input-logprob passes (chunked by ``SGLANG_ENABLE_LOGPROB_CHUNK`` /
``SGLANG_LOGPROB_CHUNK_SIZE``, ``SGLANG_ENABLE_LOGITS_PROCESSER_CHUNK`` / ``..._CHUNK_SIZE`` in 0.5.10 -
0.5.15.post1), the lm_head LoRA layer's pass routing (``set_lm_head_pass``). Its knobs are read from the
environment, as the server reads them: ``logprob_env`` sets them for a case.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import sys

import torch

# the logprob-chunk knob under both of its names: a release reads the one it has (docs/sglang.md, "LoRA knobs")
CHUNK_ENV = (("SGLANG_ENABLE_LOGPROB_CHUNK", "SGLANG_LOGPROB_CHUNK_SIZE"),
             ("SGLANG_ENABLE_LOGITS_PROCESSER_CHUNK", "SGLANG_LOGITS_PROCESSER_CHUNK_SIZE"))


@contextlib.contextmanager
def logprob_env(chunk):
    """The server's environment for the logprob passes: ``chunk`` None leaves SGLang's defaults, 0 turns the
    chunking off, n > 0 turns it on with passes of n rows."""
    names = [n for pair in CHUNK_ENV for n in pair]
    saved = {n: os.environ.get(n) for n in names}
    try:
        if chunk is not None:
            for enable, size in CHUNK_ENV:
                os.environ[enable] = "1" if chunk else "0"
                if chunk:
                    os.environ[size] = str(chunk)
        yield
    finally:
        for n, v in saved.items():
            if v is None:
                os.environ.pop(n, None)
            else:
                os.environ[n] = v


def forward_batch(cls, forward_mode, lora_ids: list, lens: list, device, tokens=None, logprob=None):
    """SGLang's ``ForwardBatch`` for a batch of ``len(lora_ids)`` requests. ``lens``: tokens per request (1 each
    in decode); ``logprob``: None (no request asks for input logprobs) or each request's logprob start (its
    ``len`` when it asks for none), with ``tokens`` the batch's input ids."""
    bs, n = len(lora_ids), sum(lens)
    extend = forward_mode.is_extend()
    ids = tokens if tokens is not None else torch.zeros(n, dtype=torch.long, device=device)
    kw = dict(forward_mode=forward_mode, batch_size=bs, input_ids=ids,
              req_pool_indices=torch.arange(bs, device=device), seq_lens=torch.tensor(lens, device=device),
              seq_lens_cpu=torch.tensor(lens), out_cache_loc=torch.arange(n, device=device), seq_lens_sum=n,
              lora_ids=list(lora_ids), rids=[str(i) for i in range(bs)], positions=torch.zeros(n, dtype=torch.long,
                                                                                              device=device))
    if extend:
        starts = list(lens) if logprob is None else list(logprob)
        kw.update(extend_seq_lens=torch.tensor(lens, dtype=torch.int32, device=device),
                  extend_seq_lens_cpu=list(lens), extend_num_tokens=n,
                  extend_prefix_lens=torch.zeros(bs, dtype=torch.int32, device=device),
                  extend_prefix_lens_cpu=[0] * bs, extend_logprob_start_lens_cpu=starts,
                  extend_start_loc=torch.tensor([sum(lens[:i]) for i in range(bs)], dtype=torch.int32, device=device),
                  is_extend_in_batch=True, return_logprob=logprob is not None,
                  top_logprobs_nums=[0] * bs, token_ids_logprobs=[None] * bs)
        if logprob is not None:
            kw["extend_input_logprob_token_ids_gpu"] = torch.tensor(
                input_logprob_token_ids(ids.tolist(), lens, starts), dtype=torch.long, device=device)
    hidden_mode = getattr(sys.modules[cls.__module__], "CaptureHiddenMode", None)
    if hidden_mode is not None:  # init_new: the server's default, no hidden states captured
        kw["capture_hidden_mode"] = hidden_mode.NULL
    fields = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: v for k, v in kw.items() if k in fields})


def input_logprob_token_ids(tokens: list, lens: list, starts: list) -> list:
    """The token whose input logprob each position from a request's logprob start asks for: the next input token,
    0 after the last (the scheduler's ``extend_input_logprob_token_ids``: the prompt shifted by one, padded)."""
    out, off = [], 0
    for n, s in zip(lens, starts):
        out += [tokens[off + p + 1] if p + 1 < n else 0 for p in range(s, n)]
        off += n
    return out


class Logits:
    """SGLang's ``LogitsProcessor`` of the release, made once per server (after its knobs are in the environment)."""

    def __init__(self, hf_config):
        from sglang.srt.layers.logits_processor import LogitsProcessor
        self.proc = LogitsProcessor(hf_config)

    def __call__(self, input_ids, hidden, lm_head, fb):
        """``(next_token_logits [bs, V], input_token_logprobs [n] or None)``."""
        out = self.output(input_ids, hidden, lm_head, fb)
        lp = getattr(out, "input_token_logprobs", None)
        return out.next_token_logits, lp

    def output(self, input_ids, hidden, lm_head, fb):
        """The ``LogitsProcessorOutput`` itself (what ``forward_batch_generation`` puts in its result)."""
        return self.proc(input_ids, hidden, lm_head, fb)


def logits_output(logits):
    """SGLang's ``LogitsProcessorOutput`` of logits computed without its ``LogitsProcessor`` (a decode graph's
    replay: the graph runner hands the captured output's logits on in one)."""
    from sglang.srt.layers.logits_processor import LogitsProcessorOutput
    return LogitsProcessorOutput(next_token_logits=logits)


def available() -> tuple[bool, str]:
    try:
        from sglang.srt.layers.logits_processor import LogitsProcessor  # noqa: F401
    except Exception as e:  # noqa: BLE001 - the target then keeps its own lm_head call
        return False, f"{type(e).__name__}: {str(e)[:160]}"
    return True, ""


__all__ = ["CHUNK_ENV", "Logits", "available", "forward_batch", "input_logprob_token_ids", "logits_output",
           "logprob_env"]
