"""``sglang_engine``'s ``tie`` knob (``tie_word_embeddings``), without SGLang: the cases draw it both ways, the model
config carries it only for a tied case, and the float64 reference reads a tied lm_head from the embedding.

Before the knob the tiny model's config fixed ``tie_word_embeddings`` False, so SGLang's tied-lm_head path (0.5.9's
``init_lora_modules`` unties it; 0.5.6.post2 - 0.5.8.post1 skip lm_head LoRA there: docs/reach.md) never ran."""

import types
from importlib import import_module

import torch
from hypothesis import HealthCheck, Phase, Verbosity, given, settings
from hypothesis import seed as hseed
from torch import nn

from fuzzrunner.coverage import features_of

cases = import_module("fuzzrunner.targets.sglang_engine.cases")
tiny = import_module("fuzzrunner.targets.sglang_engine.model")


def test_cases_draw_tie_both_ways_and_name_it_as_a_feature():
    seen: list = []

    @settings(max_examples=40, deadline=None, database=None, phases=[Phase.generate], verbosity=Verbosity.quiet,
              suppress_health_check=list(HealthCheck))
    @hseed(0)
    @given(cases.sglang_engine_cases((), max_ops=4, device="cpu"))
    def run(case):
        seen.append(case.config["tie"])
        got = {f for f in features_of(cases.features, case) if f.startswith("tie=")}
        assert got == {"tie=on" if case.config["tie"] else "tie=off"}
    run()
    assert set(seen) == {False, True}, seen
    assert {"tie=on", "tie=off"} <= set(cases.feature_space())
    assert {"tie=on", "tie=off"} <= set(cases.feature_space(scheduler=True, moe=True))


def test_case_config_ties_a_copy_only_for_a_tied_case():
    hf = types.SimpleNamespace(tie_word_embeddings=False, vocab_size=64)
    assert tiny.case_config(hf, False) is hf
    tied = tiny.case_config(hf, True)
    assert tied is not hf and tied.tie_word_embeddings is True and tied.vocab_size == 64
    assert hf.tie_word_embeddings is False  # the engine's config, shared by every case, untouched


def test_a_tied_lm_head_reads_the_embeddings_weight():
    class Inner(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed_tokens = nn.Embedding(8, 4)

    class Tied(nn.Module):
        def __init__(self):
            super().__init__()
            self.model = Inner()
            self.lm_head = self.model.embed_tokens  # as LlamaForCausalLM ties it: one module, one parameter

    m = Tied()
    base = tiny.base_weights(m)
    assert torch.equal(base["lm_head"], base["model.embed_tokens"])
    assert torch.equal(base["lm_head"], m.model.embed_tokens.weight.detach().double())
