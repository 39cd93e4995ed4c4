"""The parser on real compute-sanitizer 2025.3.1 output saved from an H200 (by scripts/gpu_sanitizer_check.sh,
since replaced by scripts/gpu_acceptance.py).

real_initcheck_dummy_run_skips_mapping_worker.log: one persistent worker under initcheck ran a
clean case, the same case with dummy_run_skips_mapping, and the clean case again (the log is cut
to the first four reports of each site; the run had 1,552 reports, all in case 2).
real_initcheck_poisoned_slot_crash.log: lora_shrink over slots poisoned with 0x7f7f7f7f under
initcheck: "initialized" to initcheck, so no read report, and the process dies.
"""

from pathlib import Path

from fuzzrunner.sanitizer.session import attribute, violations_in_log

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "sanitizer"


def test_a_real_worker_log_blames_only_the_faulty_case():
    text = (FIXTURES / "real_initcheck_dummy_run_skips_mapping_worker.log").read_text()
    assert violations_in_log(text, 1, tool="initcheck") == []
    assert violations_in_log(text, 3, tool="initcheck") == []
    found = violations_in_log(text, 2, tool="initcheck")
    sites = {(v.kind, v.kernel, v.location.split("fuzzrunner/", 1)[-1]) for v in found if v.kind == "uninitialized-read"}
    assert {("uninitialized-read", "_lora_shrink_kernel", "kernels/lora_shrink.py:29"),
            ("uninitialized-read", "_lora_expand_kernel", "kernels/lora_expand.py:33"),
            ("uninitialized-read", "_lora_bgmv_kernel", "kernels/lora_bgmv.py:28")} <= sites
    # torch's own add kernel read the never-written embedding offsets (no line info for it)
    assert any(v.kernel == "vectorized_elementwise_kernel" and v.details.get("size") == 8 for v in found)
    shrink = next(v for v in found if v.kernel == "_lora_shrink_kernel")
    assert shrink.details["size"] == 4 and shrink.details["count"] == 4
    assert set(attribute(text, tool="initcheck")) <= {None, 1, 2, 3}


def test_a_real_crash_under_initcheck_is_no_sanitizer_finding():
    """The tool's lines after its worker died ("process didn't terminate successfully", 0 errors)
    are not a report: the death itself is the hub's crash violation (issue 14: no bogus finding)."""
    text = (FIXTURES / "real_initcheck_poisoned_slot_crash.log").read_text()
    assert violations_in_log("@@fuzzrunner-case-begin 1@@\n" + text, 1, tool="initcheck") == []
