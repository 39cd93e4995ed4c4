"""The shadow oracle's reports, pinned whole in both modes (``shadow_reports.py`` says what and how to
write the pinned file again): kinds, kernels, lines, tensors, messages ("never written by any op",
"last written in op N"), elements, op numbers and every other detail, in their order. The CPU and the
device mode share one reporter (``oracles/shadow/core/``): a change to it, or to what a back end hands
it, shows here as the report it changes."""

import json

import pytest
from shadow_reports import DEVICE_PAIRS, FAULTS, PAIRS, PINNED, cpu_pair, device_pair, fault_reports

from fuzzrunner import _env

pytestmark = pytest.mark.skipif(not _env.interpreted(), reason="pinned from runs on the CPU, in Triton's interpreter")
PIN = json.loads(PINNED.read_text())


def text(reports: list) -> str:
    """As JSON: compared with every detail in its order (a report's JSON keeps it)."""
    return json.dumps(reports, indent=1)


@pytest.mark.parametrize("p", PAIRS, ids=lambda p: p.name)
def test_the_cpu_mode_reports_a_pair_as_pinned(p):
    assert text(cpu_pair(p)) == text(PIN["cpu"][p.name])


@pytest.mark.parametrize("p", DEVICE_PAIRS, ids=lambda p: p.name)
def test_the_device_mode_reports_a_pair_as_pinned(p):
    assert text(device_pair(p)) == text(PIN["device"][p.name])


@pytest.mark.parametrize("mode", ["cpu", "device"])
@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_a_planted_fault_of_the_reference_runner_is_reported_as_pinned(fault, mode):
    assert text(fault_reports(fault, mode)) == text(PIN[f"{mode}-faults"][fault])


def test_the_pin_covers_every_pair_and_the_words_of_both_modes():
    assert set(PIN["cpu"]) == {p.name for p in PAIRS} and set(PIN["device"]) == {p.name for p in DEVICE_PAIRS}
    words = json.dumps(PIN)
    for said in ("never written by any op", "written at set-up only", "last written in op 1 (step)",
                 "redirected to row 0", "outside the view(s)", "the lane was masked off", "(on thread"):
        assert said in words, said
