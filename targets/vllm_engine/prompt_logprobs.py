"""The V2 runner's prompt logprobs, as shipped: vLLM's ``PromptLogprobsWorker`` (0.15 and later).

After each step's forward the V2 runner calls ``prompt_logprobs_worker.compute_prompt_logprobs(
self.model.compute_logits, hidden_states, input_batch, all_token_ids, num_computed_tokens, prompt_lens[,
prefill_lens, num_computed_prefill_tokens])`` (``sample_tokens`` in ``model_runner.py``), under the LoRA mapping
``_set_active_loras`` made for the step. The worker picks the requests that ask for prompt logprobs and are still in
their prompt, reads the next prompt token of every scheduled row with its Triton kernel
(``_prompt_logprobs_token_ids_kernel``), takes the logits of ``hidden_states[:num_tokens]`` in chunks of
``CHUNK_SIZE`` through ``logits_fn`` (so through ``LogitsProcessorWithLoRA`` and the lm_head's LoRA mapping), and
returns, once a request's prompt is complete, its logprobs (chunks of a chunked prefill kept in between).

Here the worker is vLLM's, made and fed as the runner makes and feeds it: ``add_request`` with vLLM's
``SamplingParams(prompt_logprobs=k)`` when a request arrives, ``remove_request`` when it finishes,
``compute_prompt_logprobs`` every step with ``self.model.compute_logits``. Re-stated (GPU staging buffers):
the ``InputBatch`` fields it reads (``prepare_inputs``) and the request states' ``all_token_ids`` /
``num_computed_tokens`` / ``prompt_len`` (``RequestState``), from the case.

Oracles: each ``logits_fn`` call's rows against the float64 reference of the row's request's adapter
(``<label>.prompt_logits[k]``: vLLM's P1, vllm-project/vllm#53842, shows there); and the worker's output against
the specification, whatever the release's plumbing: a request that asks for prompt logprobs gets, in the step that
completes its prompt and not before, one row per prompt position but the last (``P - 1`` rows), whose first
column is the next prompt token and its log-softmax under the logits vLLM computed for that position's row, then
the ``k`` largest log-probabilities (``<label>.prompt_logprobs[<request>]``; anything else: a state violation);
with 0.34's ``prompt_logprob_start``, from that position on. From 0.31 the same step also calls
``compute_prompt_token_id_logprobs`` (a request's fixed token ids, from its start): prompt_scores.py.
"""

from __future__ import annotations

import inspect
from types import SimpleNamespace

import numpy as np
import torch

from fuzzrunner import tracking

from . import prompt_scores

WIDTH = 128  # all_token_ids' columns (vLLM: max_model_len): a case's requests stay far below it


def find() -> SimpleNamespace | None:
    """vLLM's prompt-logprobs worker and ``SamplingParams``, or None (a release without the V2 runner's)."""
    try:
        from vllm.sampling_params import SamplingParams
        from vllm.v1.worker.gpu.sample import prompt_logprob as module
    except ImportError:
        return None
    worker = getattr(module, "PromptLogprobsWorker", None)
    if worker is None:
        return None
    # L1 (fixed upstream by vllm-project/vllm#41411): a prompt whose last chunk is its last token is skipped
    drops_last_chunk = "prompt_lens - 1" in inspect.getsource(worker.compute_prompt_logprobs)
    scoring = prompt_scores.find(module, worker)  # prompt_logprob_token_ids / _start (0.31 on), or None
    return SimpleNamespace(module=module, Worker=worker, SamplingParams=SamplingParams,
                           make=set(inspect.signature(worker.__init__).parameters),
                           call=set(inspect.signature(worker.compute_prompt_logprobs).parameters),
                           drops_last_chunk=drops_last_chunk, scoring=scoring,
                           token_id_call=set(inspect.signature(worker.compute_prompt_token_id_logprobs).parameters)
                           if scoring else set())


class Records:
    """The oracle's record of one session's prompt-logprobs requests (whatever runner computes them): each request's
    prompt tokens, computed tokens and prompt length by a record index, what it asks, and the rows expected so far;
    ``check`` holds a runner's output against them (module docstring). ``Prompts`` (the V2 runner's worker) and
    v1_prompt_logprobs.py (the V1 runner's ``_get_prompt_logprobs_dict``) feed it."""

    def __init__(self, session, rows: int):
        self.s = session
        c = session.c
        g = torch.Generator().manual_seed(c["seed"])
        # RequestState.all_token_ids (int32, as vLLM's): a request's prompt, then whatever it samples
        self.all_token_ids = torch.randint(0, c["vocab"], (rows, WIDTH), generator=g, dtype=torch.int32)
        self.computed = np.zeros(rows, dtype=np.int32)   # RequestState.num_computed_tokens (before the step)
        self.prompt_len = np.zeros(rows, dtype=np.int32)
        self.asks: dict[str, int] = {}                # request id -> k, for a request that asks for prompt logprobs
        self.start: dict[str, int] = {}               # request id -> its first scored prompt row (0.34's start)
        self.expected: dict[str, list] = {}           # request id -> [(position, next token, want row), ...] so far
        self.added = 0                                # requests added (each draws its own prompt tokens)

    def record(self, r: dict, index: int, start: int = 0) -> int | None:
        """A new request ``r`` at record ``index``: its prompt tokens drawn; its prompt logprobs' k (None: none)."""
        k = r.get("prompt_logprobs")
        k = None if not k else 2 if k is True else int(k)
        self.computed[index] = 0
        self.prompt_len[index] = int(r.get("prompt", r["tokens"]))
        self.added += 1
        g = torch.Generator().manual_seed(self.s.c["seed"] * 1000 + self.added)
        self.all_token_ids[index] = torch.randint(0, self.s.c["vocab"], (WIDTH,), generator=g, dtype=torch.int32)
        if k is not None:
            self.asks[r["id"]] = k
            self.expected[r["id"]] = []
            self.start[r["id"]] = start
        return k

    def forget(self, rid: str) -> None:
        self.asks.pop(rid, None)
        self.expected.pop(rid, None)
        self.start.pop(rid, None)

    def advance(self, idx: np.ndarray, tokens: np.ndarray) -> None:
        """After the step: the scheduled tokens are computed."""
        self.computed[idx] += tokens

    # -- one step (shared) -------------------------------------------------------------------------------------------
    def batch(self, ids: list[str], idx: np.ndarray, tokens: np.ndarray) -> SimpleNamespace:
        """The ``InputBatch`` fields ``compute_prompt_logprobs`` reads, as ``prepare_inputs`` makes them."""
        dev = self.s.device
        qsl = np.zeros(len(ids) + 1, dtype=np.int32)
        np.cumsum(tokens, out=qsl[1:])
        computed = self.computed[idx].copy()
        return SimpleNamespace(
            req_ids=list(ids), num_reqs=len(ids), idx_mapping_np=idx.astype(np.int32),
            idx_mapping=torch.from_numpy(idx.astype(np.int32)).to(dev), num_scheduled_tokens=tokens.astype(np.int32),
            num_tokens=int(tokens.sum()), query_start_loc_np=qsl, query_start_loc=torch.from_numpy(qsl).to(dev),
            num_computed_prefill_tokens_np=np.minimum(computed, self.prompt_len[idx]),
            prefill_len_np=self.prompt_len[idx].copy())

    def _logits_fn(self, label: str, hidden: torch.Tensor, rows: list[int], seen: dict[int, torch.Tensor]):
        """The runner's ``self.model.compute_logits``, each call's rows checked (``<label>[k]``) and kept in
        ``seen`` (batch row -> logits): ``hidden`` row m is a row of adapter ``rows[m]``."""
        calls = [0]

        def logits_fn(h: torch.Tensor) -> torch.Tensor:
            first = (h.storage_offset() - hidden.storage_offset()) // hidden.stride(0)
            picked = [(first + m, rows[first + m] if first + m < len(rows) else 0) for m in range(h.size(0))]
            with tracking.region(f"{label}[{calls[0]}]"):  # a report inside names this call (known.py: P1)
                out = self.s.logits_of(f"{label}[{calls[0]}]", h, [a for _, a in picked])
            calls[0] += 1
            for m, (row, _) in enumerate(picked):
                seen[row] = out[m].detach().double().cpu()
            return out
        return logits_fn

    def check(self, label: str, out: dict, b: SimpleNamespace, seen: dict[int, torch.Tensor]) -> None:
        """The worker's output against the specification (module docstring)."""
        problems: list[str] = []
        done = self._expect(b, seen, problems)
        problems += [f"request {rid!r} asked for no prompt logprobs, yet got some" for rid in out
                     if rid not in self.asks and rid not in done]
        problems += [f"request {rid!r}: prompt logprobs returned before its prompt is complete" for rid in out
                     if rid in self.asks]
        for rid, rows in done.items():
            self._compare(f"{label}.prompt_logprobs", rid, rows, out.get(rid), problems)
        if problems:
            self.s.ctx.check(f"{label}.prompt_logprobs", problems)

    def _expect(self, b: SimpleNamespace, seen: dict[int, torch.Tensor], problems: list[str]) -> dict[str, list]:
        """Each asking request's rows of this step, from the logits vLLM computed for them; {request id: all its
        rows} for the requests whose prompt this step completes."""
        done: dict[str, list] = {}
        for i, rid in enumerate(b.req_ids):
            if rid not in self.asks:
                continue
            index = int(b.idx_mapping_np[i])
            c, n, plen = int(self.computed[index]), int(b.num_scheduled_tokens[i]), int(self.prompt_len[index])
            qs = int(b.query_start_loc_np[i])
            for p in range(max(c, self.start[rid]), min(c + n, plen - 1)):  # a scored prompt position
                row = qs + p - c
                if row not in seen:
                    problems.append(f"request {rid!r}: prompt position {p} (batch row {row}): its logits were never "
                                    f"computed through logits_fn")
                    continue
                lp = torch.log_softmax(seen[row], dim=-1)
                token = int(self.all_token_ids[index, p + 1])
                top = torch.topk(lp, self.asks[rid]).values if self.asks[rid] > 0 else lp[:0]
                self.expected[rid].append((p, token, torch.cat([lp[token:token + 1], top])))
            if c < plen <= c + n:
                done[rid] = self.expected.pop(rid, [])
                self.asks.pop(rid)
                self.start.pop(rid)
        return done

    def _compare(self, label: str, rid: str, rows: list, got, problems: list[str]) -> None:
        if not rows:  # an empty tensor is none too (the V1 runner's for a one-token prompt)
            if got is not None and got.logprobs.shape[0]:
                problems.append(f"request {rid!r}: a one-token prompt has no prompt logprobs, got "
                                f"{tuple(got.logprobs.shape)}")
            return
        if got is None:
            problems.append(f"request {rid!r}: its prompt completed this step and asked for prompt logprobs; the "
                            f"worker returned none")
            return
        lp = got.logprobs if got.logprobs.dim() == 2 else got.logprobs.unsqueeze(-1)
        ids = got.logprob_token_ids if got.logprob_token_ids.dim() == 2 else got.logprob_token_ids.unsqueeze(-1)
        want = torch.stack([r[2] for r in rows])
        if lp.shape[0] != want.shape[0] or lp.shape[1] < 1:
            problems.append(f"request {rid!r}: {lp.shape[0]} prompt-logprobs rows for a {len(rows) + 1}-token "
                            f"prompt (want {len(rows)}, one per position but the last)")
            return
        tokens = torch.tensor([r[1] for r in rows], dtype=torch.float64)
        self.s.ctx.compare(f"{label}.token_ids", ids[:, 0].detach().cpu().double(), tokens, torch.float32)
        cols = min(lp.shape[1], want.shape[1])
        self.s.ctx.compare(f"{label}.logprobs", lp[:, :cols].detach().cpu().float(), want[:, :cols], torch.float32)


class Prompts(Records):
    """The runner's prompt-logprobs state for one session: vLLM's worker and the request states it reads."""

    def __init__(self, session, found: SimpleNamespace):
        super().__init__(session, session.c["max_num_seqs"])
        self.f = found
        c = session.c
        kw = {"max_num_reqs": c["max_num_seqs"], "device": session.device, "logprobs_mode": "raw_logprobs"}
        self.worker = found.Worker(**{k: v for k, v in kw.items() if k in found.make})
        self.scores = prompt_scores.TokenIdScores(session) if found.scoring else None  # prompt_scores.py

    # -- the request's life ---------------------------------------------------------------------------------
    def add(self, r: dict, index: int) -> None:
        start = r.get("prompt_start", 0) if self.f.scoring and self.f.scoring.start_all else 0
        k = self.record(r, index, start)
        params = prompt_scores.sampling_params(self.f, r, k, self.s.cfg.model_config)
        self.worker.add_request(r["id"], index, params)
        if self.scores:
            self.scores.add(r)

    def remove(self, rid: str) -> None:
        self.worker.remove_request(rid)
        self.forget(rid)
        if self.scores:
            self.scores.remove(rid)

    def run(self, label: str, hidden: torch.Tensor, ids: list[str], idx: np.ndarray, tokens: np.ndarray,
            adapters: list[int]) -> None:
        """The runner's ``compute_prompt_logprobs`` call on the step's hidden states, then (0.31 on)
        ``compute_prompt_token_id_logprobs`` (``sample_tokens``' order), each with its output oracle."""
        b = self.batch(ids, idx, tokens)
        s, ctx = self.s, self.s.ctx
        rows = [a for a, n in zip(adapters, tokens) for _ in range(int(n))]
        seen: dict[int, torch.Tensor] = {}  # batch row -> the logits vLLM computed for it
        kw = {"logits_fn": self._logits_fn(f"{label}.prompt_logits", hidden, rows, seen), "hidden_states": hidden,
              "input_batch": b, "all_token_ids": self.all_token_ids.to(s.device),
              "num_computed_tokens": torch.from_numpy(self.computed.copy()).to(s.device),
              "prompt_lens": self.prompt_len.copy(), "prefill_lens": self.prompt_len.copy(),
              "num_computed_prefill_tokens": np.minimum(self.computed, self.prompt_len)}
        # the request states' token ids: ``prefill_token_ids`` in 0.15 - 0.16 (the prompt, as far as prompt
        # positions go), ``all_token_ids`` from 0.17; by signature
        kw["prefill_token_ids"] = kw["all_token_ids"]
        if "set_lora_rows" in self.f.call:  # a fix of P1 (docs/findings/p1_prompt_logprobs_mapping.patch)
            def set_lora_rows(start: int, end: int) -> None:
                s.activate(s.lora_state.make_prompt_logprobs_lora_inputs(ids, idx, tokens, start, end), adapters)
            kw["set_lora_rows"] = set_lora_rows
        for name in ("all_token_ids", "num_computed_tokens"):
            ctx.track(kw[name], f"prompt_logprobs.{name}")
        out = self.worker.compute_prompt_logprobs(**{k: v for k, v in kw.items() if k in self.f.call})
        if self.scores is not None:
            scored: dict[int, torch.Tensor] = {}
            kw["logits_fn"] = self._logits_fn(f"{label}.prompt_token_id_logits", hidden, rows, scored)
            got = self.worker.compute_prompt_token_id_logprobs(
                **{k: v for k, v in kw.items() if k in self.f.token_id_call})
            self.scores.check(label, got, b, self.computed, self.prompt_len, scored)
        self.check(label, out, b, seen)
