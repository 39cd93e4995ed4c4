"""``targets/sglang_engine/results_mixin.py`` and results.py's shapes: the result processing of 0.5.5 - 0.5.12.post1,
the scheduler's own ``SchedulerOutputProcessorMixin``, found by what the release has; ``run_batch``'s own lines taken
from the release's source (no SGLang import: stand-in classes with the releases' names and lines)."""

import types
from importlib import import_module

import pytest

results = import_module("fuzzrunner.targets.sglang_engine.results")
mixin = import_module("fuzzrunner.targets.sglang_engine.results_mixin")
faults = import_module("fuzzrunner.targets.sglang_engine.scheduler_faults")


class OutputMixin:  # SchedulerOutputProcessorMixin's names (0.5.12)
    def process_batch_result_prefill(self, batch, result): ...
    def add_input_logprob_return_values(self, i, req, output, logprob_pt, num_input_logprobs, last_prefill_chunk):
        return logprob_pt
    def stream_output(self, reqs, return_logprob, skip_req=None): ...


class MetricsMixin:
    def init_metrics(self, tp_rank, pp_rank, dp_rank): ...
    def get_loads(self, req=None): ...
    def report_prefill_stats(self, batch, prefill_stats, can_run_cuda_graph): ...


class RuntimeCheckerMixin:
    def _get_token_info(self): ...


class OldScheduler(OutputMixin, MetricsMixin, RuntimeCheckerMixin):  # 0.5.12's run_batch: its first lines and the lengths' copy
    def process_batch_result(self, batch, result): ...

    def run_batch(self, batch, pp_proxy_tensors=None):
        """Run a batch."""
        self.forward_ct += 1
        batch.forward_iter = self.forward_ct

        # Whether to run the profiler
        batch_result = object()
        if self.is_generation:
            batch_result = types.SimpleNamespace()
            # These 2 values are needed for processing the output, but the values can be
            # modified by overlap schedule. So we have to copy them here so that
            # we can use the correct values in output processing.
            if batch.return_logprob:
                batch_result.extend_input_len_per_req = [
                    req.extend_input_len for req in batch.reqs
                ]
                batch_result.extend_logprob_start_len_per_req = [
                    req.extend_logprob_start_len for req in batch.reqs
                ]
            else:
                batch_result.extend_input_len_per_req = None
                batch_result.extend_logprob_start_len_per_req = None

            ret = batch_result
        return ret


class Processor:  # 0.5.14+: SchedulerBatchResultProcessor, a streamer without the loads
    def process_batch_result(self): ...
    def init_batch_result_processor(self): ...
    def init_output_streamer(self):
        self.output_streamer = dict(send_to_detokenizer=None)


class Loads(Processor):  # 0.5.13: the streamer reads the load inquirer's loads
    def init_output_streamer(self):
        self.output_streamer = dict(load_inquirer_get_loads=lambda req: self.load_inquirer.get_loads(req))


def test_each_releases_result_processing_is_found_by_what_its_scheduler_has():
    """The mixin (0.5.5 - 0.5.12.post1: ``process_batch_result_prefill`` a scheduler method, no processor), the
    processor with 0.5.13's loads or without (0.5.14+); a scheduler with neither is named as not driven. Before,
    the mixin and 0.5.13 were refused and their steps kept 12 re-stated lines and an argmax."""
    assert results.shape(OldScheduler) == "mixin" and results.supported(OldScheduler) == ""
    assert results.shape(Processor) == results.shape(Loads) == "processor"
    assert results.supported(Loads) == "" and results.streams_loads(Loads) and not results.streams_loads(Processor)
    bare = type("Scheduler", (), {"process_batch_result": lambda self: None})
    assert results.shape(bare) == ""
    assert "no init_batch_result_processor, init_output_streamer, process_batch_result_prefill" in \
        results.supported(bare)


def test_the_scheduler_object_gets_the_methods_of_the_release_mixins():
    """Every function of the output processor's and the metrics mixin's classes (the helpers the mixin calls, by
    whatever name the release gives them), none of the scheduler's others."""
    got = mixin.methods(OldScheduler)
    assert {"process_batch_result_prefill", "add_input_logprob_return_values", "stream_output", "init_metrics",
            "get_loads", "report_prefill_stats", "_get_token_info"} == set(got)
    assert got["stream_output"] is OutputMixin.stream_output


def test_run_batchs_own_lines_stamp_the_batch_and_copy_the_lengths_into_the_result():
    """``run_batch_lines``: the release's first statements (to the first blank line) and its block under "These 2
    values are needed ..." up to ``ret = batch_result``, run on the scheduler object in the scheduler module's
    namespace: the forward counter, the batch's forward iteration, the per-request lengths the prefill reads."""
    head, copy = mixin.run_batch_lines(OldScheduler)
    assert head == "self.forward_ct += 1\nbatch.forward_iter = self.forward_ct", head
    assert copy.startswith(mixin.COPY_HEAD) and "ret = batch_result" not in copy, copy
    sc = types.SimpleNamespace(forward_ct=4)
    reqs = [types.SimpleNamespace(extend_input_len=3, extend_logprob_start_len=1),
            types.SimpleNamespace(extend_input_len=2, extend_logprob_start_len=0)]
    batch = types.SimpleNamespace(reqs=reqs, return_logprob=True)
    mixin.run_lines(sc, OldScheduler, head, "its first lines", batch=batch)
    assert sc.forward_ct == batch.forward_iter == 5
    result = types.SimpleNamespace()
    mixin.run_lines(None, OldScheduler, copy, "the lengths' copy", batch=batch, batch_result=result)
    assert result.extend_input_len_per_req == [3, 2] and result.extend_logprob_start_len_per_req == [1, 0]
    batch.return_logprob = False
    mixin.run_lines(None, OldScheduler, copy, "the lengths' copy", batch=batch, batch_result=result)
    assert result.extend_input_len_per_req is None


def test_a_release_without_the_copy_block_fails_loudly():
    """A ``run_batch`` whose lengths' copy is not where the comment says is a target error (StopIteration), not a
    result without the lengths."""
    class Other:
        def run_batch(self, batch):
            self.forward_ct += 1

            return batch
    with pytest.raises(StopIteration):
        mixin.run_batch_lines(Other)


def test_the_cursor_fault_on_the_mixin_hands_every_request_the_batchs_first_rows():
    """``logprob_cursor_not_advanced`` on the mixin (its prefill loop without ``logprob_pt += num_input_logprobs``):
    each ``add_input_logprob_return_values`` call reads from cursor 0, whatever the loop passed; ``close`` undoes it."""
    sc = type("Scheduler", (), {"add_input_logprob_return_values": OutputMixin.add_input_logprob_return_values})()
    server = types.SimpleNamespace(patches=[])
    faults._mixin_cursor_not_advanced(server, sc)
    assert sc.add_input_logprob_return_values(1, "req", "out", 5, 2, True) == 0
    assert sc.add_input_logprob_return_values(1, "req", "out", logprob_pt=7, num_input_logprobs=2,
                                              last_prefill_chunk=False) == 0
    server.patches.pop().stop()
    assert sc.add_input_logprob_return_values(1, "req", "out", 5, 2, True) == 5
