"""A step's requests served through SGLang's scheduler (scheduler.py), round by round, with the properties the
engine's users rely on checked at every round.

A step op's requests (``reqs``: adapter name or null each) arrive at their round (``arrive``, default 0), each
with a prompt of ``lens[i]`` tokens (1 in a decode step) and ``new[i]`` tokens to generate (default: 1 in an extend
step, the request finishes with its prefill; 2 in a decode step, so that its requests make a decode batch). Each
is resolved by the tokenizer manager (frontend.py: an unloaded adapter is reloaded, ``LoRARegistry.acquire``),
queued in the scheduler's waiting queue, and the scheduler runs rounds until
every request has finished; a finished request releases its adapter (``LoRARegistry.release``). Each round's batch
is SGLang's ``ScheduleBatch``, its ``ForwardBatch`` made by ``ForwardBatch.init_new`` (scheduler.py), and run by
the session's forward (runner.Session.forward: the logits against the float64 reference, the base rows, the pool).

Checks (``state`` of ``step``), each a property users would write:

* every batch the scheduler runs holds at most ``--max-loras-per-batch`` distinct adapters (the base model
  included), at most ``--max-running-requests`` requests, and a prefill batch at most ``--chunked-prefill-size``
  new tokens where chunking is on; the request pool and the KV pool never hand out more than they have;
* progress: a round in which some arrived request is unfinished runs a batch;
* no starvation: every request finishes within ``bound`` rounds of the step's start, ``bound`` = the last arrival
  + the step's whole work (each request's prefill chunks, ``ceil(len / chunk) + 1`` with ``chunk`` the smaller of
  ``--chunked-prefill-size`` and ``--max-prefill-tokens``, plus its ``new - 1`` decode steps) + 1, and each
  retraction's work again (``retraction.rework``: a retracted request recomputes its prefill). The scheduler is
  work-conserving on these cases, so every round advances some request by a chunk or a token, drain policy or not;
* the KV pool (``step.kv-pool``, retraction.py): once every request of the step finished, nothing is held (free
  slots plus the radix tree's evictable ones are the whole pool); a small pool (``max_total_tokens``) and SGLang's
  retraction test mode make ``update_running_batch`` retract requests;
* every request generated exactly ``new`` tokens;
* the prefix cache (``step.prefix-cache``, ``check_prefix``; the radix cache on, ``disable_radix_cache`` False): the
  KV slots a request of a prefill batch reuses from the cache were written by a request of its own adapter (both the
  base model: None) under the same own ``extra_key`` (``key[i]``, keys.py), never by another adapter's or another
  key's, nor left unwritten. Requests share prompt prefixes through the step's ``stem`` (``stem[i]`` tokens of the
  case's fixed stem, ``stem_tokens``, before each prompt's own tokens).
"""

from __future__ import annotations

import asyncio
import math

import torch

from . import keys as user_keys
from . import retraction
from .cases import STEM_MAX
from .frontend import ARRIVAL_YIELDS, _arrivals
from .served_logprobs import Ledger

IDLE_ROUNDS = 3  # rounds without a batch while requests wait or run: the scheduler is stuck


def work(lens: list, new: list, chunk: int) -> int:
    """Rounds a serial schedule needs at most: each request's prefill chunks (one more for a first piece that
    shares a round's chunk budget with another request) and decode steps."""
    return sum(math.ceil(n / chunk) + 1 for n in lens) + sum(max(k - 1, 0) for k in new)


STEM_SEED = 43  # the shared stem's generator seed


def stem_tokens(vocab: int) -> list:
    """The case's shared prompt stem (``serve``): fixed tokens, so that steps share it as well as requests."""
    return torch.randint(0, vocab, (STEM_MAX,), generator=torch.Generator().manual_seed(STEM_SEED)).tolist()


def serve(session, server, op) -> tuple[list[str], list[tuple[str, str]]]:
    """Serve ``op``'s requests (module doc); the problems a user would see, and the drain check's apart, each with
    what the drainer did (``_Step._check_drain``: its own check label, ``step.drain[...]``). A step that ends with
    requests still in the scheduler (a batch broke a limit and was not run, or the scheduler stalled: its problem is
    reported) marks
    the server ``abandoned``, and the case's later ops are not run (runner.run): the scheduler and the registry hold
    requests of that step, which a later step's accounting does not know (a campaign's target error:
    ``KeyError: 'r5'``) and the registry's checks would count as leaks."""
    names = list(op["reqs"])
    n = len(names)
    mode = op.get("mode", "decode")
    lens = list(op.get("lens", [1] * n)) if mode == "extend" else [1] * n
    # without ``new``: an extend step's requests finish with their prefill; a decode step's run one decode batch too
    new = list(op.get("new", [2 if mode == "decode" else 1] * n))
    arrive = list(op.get("arrive", [0] * n))
    g = torch.Generator().manual_seed(op.get("seed", 0))
    vocab = session.eng.hf_config.vocab_size
    # a shared stem (``stem[i]`` tokens, the same for every step of the case): requests of one adapter, of several
    # and of the base model share prompt prefixes, so the radix cache (``disable_radix_cache`` False) has matches
    stem = stem_tokens(vocab)
    prompts = [stem[: k0] + torch.randint(0, vocab, (k,), generator=g).tolist()
               for k0, k in zip(op.get("stem", [0] * n), lens)]
    front = session.front
    loop = front.loop if front is not None else asyncio.new_event_loop()
    try:
        return loop.run_until_complete(_Step(session, server, names, prompts, new, arrive, op.get("logprob"),
                                             op.get("key")).run())
    finally:
        server.abandoned = server.busy()
        if front is None:
            loop.close()


class _Step:
    """One step's requests on their way through the tokenizer manager and the scheduler."""

    def __init__(self, session, server, names, prompts, new, arrive, logprob=None, key=None):
        self.s, self.server, self.names, self.prompts, self.new, self.arrive = (
            session, server, names, prompts, new, arrive)
        self.logprob = logprob     # each request's input-logprob start, or None (no request asks logprobs)
        self.key = list(key or [None] * len(names))  # each request's own extra_key as drawn (keys.py)
        self.keys: dict = {}       # request index -> the extra_key it sent (keys.resolve, at its arrival)
        self.retracted: dict = {}  # request index -> how often the scheduler retracted it (retraction.py)
        self.waiting: set = set()  # the request indices in the waiting queue after the last round
        self.ledger = Ledger(session)
        self.front, self.problems = session.front, []
        self.drain: list = []      # (what the drainer did, problem): the drain check's, a label of its own each
        self.resolved: dict = {}   # request index -> lora_id (None: the base model)
        self.submitted: dict = {}  # request index -> Req
        self.finished: dict = {}   # request index -> the step's round it finished in
        self.index: dict = {}      # rid -> request index
        self.queued: dict = {}     # request index -> the step's round it was queued in
        self.admitted: dict = {}   # request index -> the step's round of its first batch
        self.decodes: list = []    # the step's rounds that ran a decode batch
        self.draining: dict = {}   # (drained lora_id, the lora_id it drains for) -> the step's first round seen
        self.while_draining: dict = {}  # drained lora_id -> its requests admitted while it drained (indices)
        sc = server.sc
        self.chunk = chunk = min(c for c in (sc.chunked_prefill_size, sc.max_prefill_tokens, 1 << 30) if c and c > 0)
        self.bound = max(arrive, default=0) + work([len(p) for p in prompts], new, chunk) + 1
        self.start = server.rounds  # rounds count from the step's start

    @property
    def round(self) -> int:
        return self.server.rounds - self.start

    async def resolve(self, i, name) -> None:
        if self.front is None:
            self.resolved[i] = None if name is None else self.s.refs[name].lora_id
            return
        try:
            self.resolved[i] = await self.front._resolve(name)
        except ValueError as e:  # refused: fine for an adapter that is not registered (and not reloaded)
            if name in self.front.registered():
                self.problems.append(f"request {i} for registered adapter {name!r} was refused: {str(e)[:160]}")

    def submit_arrived(self) -> bool:
        """Queue the resolved requests whose round has come; whether some resolved request is still to arrive."""
        for i in sorted(self.resolved):
            if i not in self.submitted and self.arrive[i] <= self.round:
                self.keys[i] = user_keys.resolve(self.key[i], self.s)
                self.submitted[i] = self.server.submit(f"r{i}", self.prompts[i], self.new[i], self.resolved[i],
                                                       None if self.logprob is None else self.logprob[i],
                                                       **({} if self.keys[i] is None else {"extra_key": self.keys[i]}))
                self.index[f"r{i}"] = i
                self.queued[i] = self.round
        return any(i not in self.submitted for i in self.resolved)

    async def run(self) -> tuple[list[str], list[tuple[str, str]]]:
        tasks = [asyncio.ensure_future(self.resolve(i, nm)) for i, nm in enumerate(self.names)]
        idle = 0
        while self.round <= self.bound + IDLE_ROUNDS:
            for _ in range(ARRIVAL_YIELDS):  # let each arriving request run until it is queued or blocked
                await asyncio.sleep(0)
            to_arrive = self.submit_arrived()
            if not self.server.busy() and not to_arrive:
                if any(not t.done() for t in tasks) and await _arrivals(tasks, self.problems):
                    continue
                break
            batch = self.server.round()
            self._observe_drainer()
            self._observe_retractions()
            if batch is None:
                idle += 1 if self.server.busy() else 0
                if idle >= IDLE_ROUNDS:
                    self.problems.append(self._stuck(idle))
                    break
                continue
            idle = 0
            if not await self._one(batch):
                break  # the engine would be asked for what it does not have
        self._check_done()
        for t in tasks:
            if t.done() and not t.cancelled() and t.exception() is not None:
                raise t.exception()  # type: ignore[misc]
        return self.problems, self.drain

    def _observe_drainer(self) -> None:
        """Which adapters SGLang's ``LoRADrainer`` marks draining, and for whom, as of this round (read only: what
        the drain check's message says)."""
        drainer = getattr(self.server.sc, "lora_drainer", None)
        for lora_id, stats in (drainer.adapter_to_stats.items() if drainer is not None else ()):
            if stats.is_draining_for is not None:
                self.draining.setdefault((lora_id, stats.is_draining_for), self.round)

    def _observe_retractions(self) -> None:
        """The requests the round's ``update_running_batch`` retracted (``retract_decode``): admitted before, back in
        the waiting queue now (``_add_request_to_queue(req, is_retracted=True)``); each retraction adds its request's
        work again to the step's bound (its prefill is recomputed)."""
        now = {self.index[r.rid] for r in self.server.sc.waiting_queue if r.rid in self.index}
        for i in now - self.waiting:
            if i in self.admitted:
                self.retracted[i] = self.retracted.get(i, 0) + 1
                self.bound += retraction.rework(len(self.prompts[i]), self.new[i], self.chunk)
        self.waiting = now

    def _draining_now(self) -> set:
        drainer = getattr(self.server.sc, "lora_drainer", None)
        return {k for k, v in (drainer.adapter_to_stats.items() if drainer is not None else ())
                if v.is_draining_for is not None}

    async def _one(self, batch) -> bool:
        """Run one batch the scheduler made; False where it breaks a limit (not run)."""
        draining = self._draining_now()
        for r in batch.reqs:
            i = self.index[r.rid]
            if i not in self.admitted and r.lora_id in draining:
                self.while_draining.setdefault(r.lora_id, []).append(i)
            self.admitted.setdefault(i, self.round)
        if batch.forward_mode.is_decode():
            self.decodes.append(self.round)
        self.problems += _check_batch(self.server, batch, self.index)
        if batch.forward_mode.is_extend():
            self.s.ctx.check("step.prefix-cache", check_prefix(self.server, batch, self.index, self.names, self.keys))
        if self.problems:
            return False
        for req in _run(self.s, self.server, batch, self.index, self.names, self.ledger, self.keys):
            self.finished[self.index[req.rid]] = self.round
            if self.logprob is not None:
                self.ledger.finish(req, self.logprob[self.index[req.rid]])
            if self.front is not None:
                await self.front._release(req.lora_id)
        return True

    def _check_drain(self) -> list[tuple[str, str]]:
        """With ``--lora-drain-wait-threshold`` T (rounds here), a request that has waited past T gets its slot
        within one drain per adapter waiting with it: from its starving round, at most ``K * (ceil(1.2 * M) + 1)``
        decode rounds pass before its first batch (K: the distinct adapters of the requests waiting then that no
        running request holds, its own included; M: the most tokens a request of the step asks; 1.2: SGLang's
        ``DRAIN_SCHEDULE_TOLERANCE``, the budget a draining adapter's requests keep). A drain that never starts or
        never ends lets the decode rounds of the adapters holding the slots go on while it waits (the option's
        promise: "the scheduler will selectively drain one running adapter to make room"). Each problem comes with
        what the drainer did (``_drains_for``), its check's label: a drain that never started (SG1) and one that
        never ended (SG2) are two findings, not one (the sixth pass: SG1's seed was filed under SG2's finding)."""
        drainer = getattr(self.server.sc, "lora_drainer", None)
        t = drainer.max_wait_time_secs if drainer is not None else 0
        if not t:
            return []
        m, out = max(self.new, default=1), []
        for i in sorted(self.queued):
            starving = self.queued[i] + int(t) + 1
            end = self.admitted.get(i, self.round + 1)
            never = self.round + 1
            running = {self.resolved[j] for j in self.admitted
                       if self.admitted[j] < starving <= self.finished.get(j, never)}
            waiting = {self.resolved[j] for j in self.queued
                       if self.queued[j] <= starving and self.admitted.get(j, never) > starving} - running
            bound = max(len(waiting), 1) * (math.ceil(1.2 * m) + 1)
            waited = [d for d in self.decodes if starving <= d < end]
            if len(waited) > bound:
                how, did = self._drains_for(self.resolved[i], end)
                out.append((how, f"request {i} ({self.names[i]!r}) waited {len(waited)} decode rounds past the drain "
                                 f"threshold ({int(t)} rounds; from round {starving} to {end}) for its adapter's "
                                 f"slot, above {bound} ({len(waiting)} adapter(s) waiting x (ceil(1.2 x {m}) + 1)): "
                                 + did))
                break
        return out

    def _drains_for(self, lora_id, end: int) -> tuple[str, str]:
        """What the drainer did for ``lora_id`` before round ``end``: ``("not started" | "kept admitting" | "slow",
        the words the sweep's triage reads)``."""
        drained = sorted(((r, d) for (d, f), r in self.draining.items() if f == lora_id and r < end),
                         key=lambda rd: rd[0])  # by round: the ids (None, str) do not order
        if not drained:
            return "not started", "no running adapter was marked draining for it"
        name = {self.resolved[j]: self.names[j] for j in self.resolved}
        r, d = drained[0]
        extra = [j for j in self.while_draining.get(d, []) if self.admitted[j] >= r]
        return ("kept admitting" if extra else "slow",
                f"{name.get(d, d)!r} was marked draining for it at round {r} and admitted {len(extra)} more of its "
                f"requests while draining (requests {extra[:8]})")

    def _stuck(self, idle: int) -> str:
        sc, ix = self.server.sc, self.index
        return (f"the scheduler ran no batch for {idle} rounds while requests "
                f"{sorted(ix[r.rid] for r in sc.waiting_queue)} waited (running: "
                f"{[ix[r.rid] for r in sc.running_batch.reqs]})")

    def _check_done(self) -> None:
        late = sorted(i for i in self.submitted if self.finished.get(i, self.bound + 1) > self.bound)
        if late and not self.problems:
            i = late[0]
            self.problems.append(
                f"requests {late} did not finish within {self.bound} rounds (last arrival + the step's work + 1), "
                f"e.g. request {i} ({self.names[i]!r}) "
                + (f"finished at round {self.finished[i]}" if i in self.finished else "never finished"))
        if not self.problems:
            self.drain += self._check_drain()
            if len(self.finished) == len(self.submitted) and not self.server.busy():  # all done: nothing held
                self.s.ctx.check("step.kv-pool", retraction.check_returned(self.server, self.retracted, self.names))
        for i, req in self.submitted.items():
            if i in self.finished and len(req.output_ids) != self.new[i]:
                self.problems.append(f"request {i} generated {len(req.output_ids)} tokens, asked {self.new[i]}")


def _check_batch(server, batch, index) -> list[str]:
    """The batch the scheduler made fits the server's limits and pools (module doc)."""
    sc, out = server.sc, []
    ids = {r.lora_id for r in batch.reqs}
    if len(ids) > sc.max_loras_per_batch:
        mode = batch.forward_mode.name.lower()
        article = "an" if mode[0] in "aeiou" else "a"
        out.append(f"the scheduler made {article} {mode} batch of {len(ids)} adapters (base included) for "
                   f"{sc.max_loras_per_batch} slots: requests {[index[r.rid] for r in batch.reqs]}")
    if len(batch.reqs) > sc.max_running_requests:
        out.append(f"the scheduler made a batch of {len(batch.reqs)} requests, above --max-running-requests "
                   f"{sc.max_running_requests}")
    chunk = sc.chunked_prefill_size
    if batch.forward_mode.is_extend() and chunk and batch.extend_num_tokens > chunk:
        out.append(f"a prefill batch of {batch.extend_num_tokens} new tokens, above --chunked-prefill-size {chunk}")
    if server.alloc.available_size() < 0 or server.req_pool.available_size() < 0:
        out.append(f"a pool handed out more than it has (KV free {server.alloc.available_size()}, request rows free "
                   f"{server.req_pool.available_size()})")
    return out


def prefix_slots(server, batch) -> list:
    """Each request's KV positions reused from the cache, in the batch's order: the first ``prefix_lens[i]`` entries
    of its row of the request pool (``batch.req_pool_indices``; what ``prepare_for_extend`` wrote there from
    ``match_prefix``'s indices: ``req.prefix_indices`` 0.5.5 - 0.5.21, ``req.prefix_len`` and the tree's nodes
    0.5.22+), the row the attention
    reads the prefix's K/V through."""
    rows = server.req_pool.req_to_token
    return [rows[int(row), : int(k)].tolist() for row, k in zip(batch.req_pool_indices.tolist(), batch.prefix_lens)]


def check_prefix(server, batch, index, names, keys=None) -> list[str]:
    """The prefix a request reuses was written by a request of the same adapter (both the base model: None) and the
    same own ``extra_key`` (``keys``: request index -> the key it sent, keys.py; both none: None): the radix tree must
    not hand one adapter's K/V to another's request, nor one user key's to another's. A slot no forward wrote is a
    read of uninitialized K/V. ``server.kv_writer``: who wrote each slot (``_run``)."""
    out, keys = [], keys or {}
    for r, slots in zip(batch.reqs, prefix_slots(server, batch)):
        i = index[r.rid]
        key = keys.get(i)
        for slot in slots:
            writer = server.kv_writer.get(slot)
            if writer is not None and len(writer) < 3:
                writer = (*writer, None)  # a writer that sent no key of its own (record_writes)
            if writer is None:
                out.append(f"request {i} ({names[i]!r}, lora_id {r.lora_id}) reuses KV slot {slot} that no forward "
                           f"wrote")
            elif writer[1] != r.lora_id:
                out.append(f"request {i} ({names[i]!r}, lora_id {r.lora_id}"
                           + (f", extra_key {key!r}" if key is not None else "")
                           + f") reuses KV slot {slot} written by {writer[0]} of another adapter (lora_id {writer[1]}"
                           + (f", extra_key {writer[2]!r}" if writer[2] is not None else "") + ")")
            elif writer[2] != key:
                out.append(f"request {i} ({names[i]!r}, extra_key {key!r}) reuses KV slot {slot} written by "
                           f"{writer[0]} of its adapter under another extra_key ({writer[2]!r})")
            else:
                server.reused += 1
                continue
            break  # one slot per request: the first that is wrong
    return out


def record_writes(server, batch, index, names, keys=None) -> None:
    """Every KV slot the batch's forward writes, with the request whose token it holds (its lora_id and own key): the
    batch's ``out_cache_loc``, in the order of its requests' new tokens (``extend_lens``; one per request in a
    decode)."""
    keys = keys or {}
    locs = batch.out_cache_loc.tolist()
    counts = list(batch.extend_lens) if batch.forward_mode.is_extend() else [1] * len(batch.reqs)
    off = 0
    for r, k in zip(batch.reqs, counts):
        i = index[r.rid]
        who = f"request {i} ({names[i]!r}) of round {server.rounds}"
        for slot in locs[off: off + k]:
            # (who, lora_id), and the key it sent where it sent one (check_prefix: none is None)
            server.kv_writer[slot] = (who, r.lora_id) + (() if keys.get(i) is None else (keys[i],))
        off += k


def _run(session, server, batch, index, names, ledger, keys=None) -> list:
    """The batch through ``ForwardBatch.init_new``, the session's forward (its checks), SGLang's sampling and result
    processing (scheduler.Server.result / finish_round), the logprobs it stored (``ledger``); the requests that
    finished."""
    fb = server.forward_batch(batch)
    reqs = list(batch.reqs)
    req_names = [names[index[r.rid]] for r in reqs]
    ids = [r.lora_id for r in reqs]
    extend = batch.forward_mode.is_extend()
    lens = list(fb.extend_seq_lens_cpu) if extend else [1] * len(reqs)
    fw = session.forward_output(fb, req_names, ids, "extend" if extend else "decode", lens, fb.input_ids)
    record_writes(server, batch, index, names, keys)  # the K/V the attention writes to SGLang's pool, by its request
    graph = session.graphs is not None and not extend and session.graphs.pick(len(reqs)) is not None
    before = ledger.before(batch)
    done = server.finish_round(batch, server.result(fw.output, fb, batch, graph))
    ledger.record(batch, fb, fw, before)
    return done


__all__ = ["serve", "work"]
