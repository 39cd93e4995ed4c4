"""compute-sanitizer support: locating it, the wrapper, parsing reports, giving them to cases.

Everything here runs on the CPU against fake executables and the report fixtures of
``tests/fixtures/sanitizer`` (hand-written until real GPU output replaces them); the
hub tests run a fake "compute-sanitizer" that injects a report into a real worker's
output. Only ``test_self_test_on_a_gpu`` needs the real tool and a device.
"""

import stat
import sys
from pathlib import Path

import pytest

from fuzzrunner.case import Case
from fuzzrunner.context import Context
from fuzzrunner.engine import hub as hub_module
from fuzzrunner.engine.hub import Hub, WorkerSpec
from fuzzrunner.errors import InvalidArgument, SanitizerNotFound
from fuzzrunner.sanitizer import locate, parse_text, parse_xml, sanitizer_wrapper, violations_in_log
from fuzzrunner.sanitizer.locate import Sanitizer, find_sanitizer, parse_version
from fuzzrunner.sanitizer.parse import dedupe, kernel_name
from fuzzrunner.sanitizer.selftest import check, self_test
from fuzzrunner.sanitizer.session import attribute

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures" / "sanitizer"
SHRINK_29 = "fuzzrunner/kernels/lora_shrink.py:29"


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


# -- locating the executable ------------------------------------------------------------------

FAKE_TOOL = """#!/bin/sh
case "$1" in
  --version) echo "NVIDIA (R) Compute Sanitizer"; echo "Copyright (c) 2020-2025 NVIDIA Corporation";
             echo "Version 2025.3.1.0 (build 36398380) (public-release)";;
  --help) echo "  --print-limit arg   Use 0 for unlimited printing."; echo "  --strip-paths arg";
          echo "  --destroy-on-device-error arg"; echo "  --tool arg";;
esac
"""


def fake_tool(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(FAKE_TOOL)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


@pytest.fixture
def nowhere(tmp_path, monkeypatch):
    """No compute-sanitizer anywhere: an empty PATH, no CUDA_HOME, no system CUDA, no wheel."""
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    for var in ("CUDA_HOME", "CUDA_PATH", locate.ENV_VAR):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(locate, "SYSTEM_CUDA", ())
    monkeypatch.setattr(locate, "_wheel_dirs", lambda: [])
    return tmp_path


def test_found_on_path_with_its_version_and_options(nowhere, monkeypatch):
    exe = fake_tool(nowhere / "bin" / "compute-sanitizer")
    monkeypatch.setenv("PATH", str(exe.parent))
    s = find_sanitizer()
    assert s.path == str(exe)
    assert s.version == "2025.3.1.0"
    assert s.version_line.startswith("Version 2025.3.1.0")
    assert s.supports("--strip-paths") and s.supports("print-limit") and not s.supports("padding")


def test_found_under_cuda_home(nowhere, monkeypatch):
    exe = fake_tool(nowhere / "cuda" / "bin" / "compute-sanitizer")
    monkeypatch.setenv("CUDA_HOME", str(nowhere / "cuda"))
    assert find_sanitizer().path == str(exe)


@pytest.mark.parametrize("layout", locate.WHEEL_PATHS)
def test_found_in_the_wheel(nowhere, monkeypatch, layout):
    site = nowhere / "site-packages"
    exe = fake_tool(site.joinpath(*layout))
    monkeypatch.setattr(locate, "_wheel_dirs", lambda: [str(site)])
    assert find_sanitizer().path == str(exe)


def test_explicit_path_and_environment_variable_win(nowhere, monkeypatch):
    on_path = fake_tool(nowhere / "bin" / "compute-sanitizer")
    chosen = fake_tool(nowhere / "other" / "compute-sanitizer")
    monkeypatch.setenv("PATH", str(on_path.parent))
    assert find_sanitizer(str(chosen)).path == str(chosen)
    assert find_sanitizer(str(chosen.parent)).path == str(chosen)  # a folder holding it
    monkeypatch.setenv(locate.ENV_VAR, str(chosen))
    assert find_sanitizer().path == str(chosen)


def test_a_bad_explicit_path_is_not_silently_replaced(nowhere, monkeypatch):
    monkeypatch.setenv(locate.ENV_VAR, str(nowhere / "no-such-tool"))
    with pytest.raises(SanitizerNotFound, match="FUZZRUNNER_COMPUTE_SANITIZER=.*no-such-tool.*not an executable"):
        find_sanitizer()


def test_not_found_says_where_it_looked_and_how_to_fix(nowhere):
    with pytest.raises(SanitizerNotFound) as e:
        find_sanitizer()
    msg = str(e.value)
    assert "\n" not in msg
    for needle in ("PATH", "CUDA_HOME", "/usr/local/cuda/bin", "pip install nvidia-cuda-sanitizer-api",
                   "FUZZRUNNER_COMPUTE_SANITIZER"):
        assert needle in msg


@pytest.mark.parametrize("text, version", [
    ("NVIDIA (R) Compute Sanitizer\nCopyright (c) 2020-2025 NVIDIA Corporation\n"
     "Version 2025.3.1.0 (build 36398380) (public-release)\n", "2025.3.1.0"),
    ("NVIDIA (R) Compute Sanitizer\nVersion 2022.4.0\n", "2022.4.0"),
    ("compute-sanitizer: version 2026.1.0.0\n", "2026.1.0.0"),
    ("Error: cannot load the driver\n", ""),
    ("", ""),
])
def test_version_parsing(text, version):
    assert parse_version(text)[0] == version


def test_no_gpu_when_no_device_is_visible(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert not locate.gpu_available()


# -- the wrapper --------------------------------------------------------------------------------

OLD = Sanitizer("/opt/cs/compute-sanitizer", "2024.1.0", "", frozenset())
NEW = Sanitizer("/opt/cs/compute-sanitizer", "2025.3.1.0", "",
                frozenset({"strip-paths", "destroy-on-device-error", "padding"}))


def flag(argv: list, name: str):
    return argv[argv.index(name) + 1] if name in argv else None


@pytest.mark.parametrize("tool", ["initcheck", "memcheck", "racecheck", "synccheck"])
def test_wrapper_flags(tool):
    argv, env = sanitizer_wrapper(tool, sanitizer=NEW)
    assert argv[0] == NEW.path and flag(argv, "--tool") == tool
    assert flag(argv, "--print-limit") == "0"  # unlimited: the limit spans the worker's whole life
    assert flag(argv, "--show-backtrace") == "no"
    assert flag(argv, "--error-exitcode") == "0"
    assert int(flag(argv, "--launch-timeout")) >= 60
    assert flag(argv, "--strip-paths") == "no"
    assert (flag(argv, "--destroy-on-device-error") == "kernel") == (tool in ("memcheck", "synccheck"))
    assert (flag(argv, "--padding") is not None) == (tool == "memcheck")
    assert env["FUZZRUNNER_SANITIZER"] == tool and env["CUDA_LAUNCH_BLOCKING"] == "1"
    caching_off = env.get("PYTORCH_NO_CUDA_MEMORY_CACHING") == "1"
    assert caching_off == (tool in ("initcheck", "memcheck"))


def test_initcheck_turns_the_caching_allocator_off():
    # docs/background.md (facts measured on an H200): with caching on, a tensor carved from a freed, once-written block is not reported.
    assert sanitizer_wrapper("initcheck", sanitizer=OLD)[1]["PYTORCH_NO_CUDA_MEMORY_CACHING"] == "1"


def test_wrapper_leaves_out_options_the_tool_does_not_list():
    argv, _ = sanitizer_wrapper("memcheck", sanitizer=OLD)
    assert not {"--strip-paths", "--destroy-on-device-error", "--padding"} & set(argv)
    assert flag(argv, "--print-limit") == "0"


def test_wrapper_rejects_an_unknown_tool():
    with pytest.raises(InvalidArgument, match="'leakcheck' must be one of initcheck"):
        sanitizer_wrapper("leakcheck", sanitizer=NEW)


# -- parsing ------------------------------------------------------------------------------------

def by_location(vs) -> dict:
    return {v.location.split("fuzzrunner/", 1)[-1] if "fuzzrunner/" in v.location else v.location: v for v in vs}


def test_initcheck_reports_become_one_violation_per_site_with_counts():
    vs = parse_text(fixture("initcheck_worker.log"), tool="initcheck")
    assert [v.kind for v in vs] == ["uninitialized-read"] * 3
    assert {v.tool for v in vs} == {"initcheck"}
    shrink, utils, expand = vs
    assert shrink.location.endswith(SHRINK_29) and shrink.kernel == "_lora_shrink_kernel"
    assert shrink.details["count"] == 3
    assert shrink.details["thread"] == [0, 0, 0] and shrink.details["block"] == [0, 0, 0]
    assert shrink.details["address"] == "0x7f1e2a000200" and shrink.details["size"] == 4
    assert "Uninitialized __global__ memory read" in shrink.details["report"]
    assert "\n" not in shrink.message and SHRINK_29 in shrink.message
    assert utils.location.endswith("fuzzrunner/kernels/kernel_utils.py:60") and utils.kernel == "_lora_shrink_kernel"
    assert expand.location.endswith("fuzzrunner/kernels/lora_expand.py:33") and expand.kernel == "_lora_expand_kernel"
    assert utils.details["count"] == expand.details["count"] == 1
    assert shrink.tensor == ""


def test_memcheck_out_of_bounds_and_misaligned():
    oob, misaligned = parse_text(fixture("memcheck_oob.log"), tool="memcheck")
    assert oob.kind == "out-of-bounds" and oob.tool == "memcheck"
    assert oob.location.endswith("fuzzrunner/kernels/kernel_utils.py:28")
    assert oob.details["count"] == 2  # "Address ..." (2025.3) and "Access to ..." wordings alike
    assert oob.details["nearest_allocation"] == {"address": "0x7f519ee00000", "size": 4096, "where": "after",
                                                 "distance": 8_561_920_000}
    assert misaligned.kind == "sanitizer-error" and misaligned.kernel == "_misaligned_kernel"


def test_racecheck_and_synccheck_reports():
    cases = attribute(fixture("racecheck_synccheck.log"))
    analysis, hazard = cases[1]
    assert analysis.tool == hazard.tool == "racecheck"
    assert analysis.kind == hazard.kind == "sanitizer-error"
    assert analysis.kernel == hazard.kernel == "_reduce_kernel"
    assert analysis.location.endswith("race.py:41") and "508 hazards" in analysis.details["report"]
    assert hazard.location.endswith("race.py:20")
    (sync,) = cases[2]
    assert (sync.tool, sync.kind, sync.kernel) == ("synccheck", "sanitizer-error", "_sync_kernel")
    assert sync.location.endswith("sync.py:42") and sync.details["thread"] == [32, 0, 0]


def test_stripped_paths_find_their_file_in_the_checkout():
    (v,) = parse_text(fixture("stripped_paths.log"))
    assert v.location == SHRINK_29  # the tool's default prints bare names


def test_paths_under_the_checkout_become_relative():
    text = ("========= Uninitialized __global__ memory read of size 4 bytes\n"
            f"=========     at _lora_shrink_kernel+0x80 in {REPO}/fuzzrunner/kernels/lora_shrink.py:29\n"
            "=========     by thread (0,0,0) in block (0,0,0)\n")
    assert parse_text(text)[0].location == SHRINK_29


@pytest.mark.parametrize("func, name", [
    ("_lora_shrink_kernel", "_lora_shrink_kernel"),
    ("void _lora_expand_kernel<int, float>(float *, int)", "_lora_expand_kernel"),
    ("sumKernel(int *, int *)", "sumKernel"),
    ("void ns::inner::k()", "k"),
    ("[clone myKernel(int *, int *)] outlineSync()", "myKernel"),
    ("0x79d8", ""),
])
def test_kernel_names(func, name):
    assert kernel_name(func) == name


def test_xml_records():
    uninit, oob = parse_xml(fixture("initcheck.xml"), tool="initcheck")
    assert (uninit.kind, uninit.kernel, uninit.details["count"]) == ("uninitialized-read", "_lora_shrink_kernel", 2)
    assert uninit.location.endswith(SHRINK_29)
    assert uninit.details["thread"] == [0, 0, 0] and uninit.details["address"] == "0x7f1e2a000200"
    assert uninit.details["size"] == 4
    assert oob.kind == "out-of-bounds" and oob.location.endswith("fuzzrunner/kernels/lora_expand.py:40")
    assert oob.details["block"] == [2, 0, 0]


def test_xml_cut_short_keeps_its_complete_records():
    text = fixture("initcheck.xml")
    cut = text[:text.index("<kind>Precise</kind>")]
    (v,) = parse_xml(cut.encode())
    assert v.kind == "uninitialized-read" and v.details["count"] == 2


def test_dedupe_adds_counts():
    a = parse_text(fixture("initcheck_worker.log"))
    b = parse_text(fixture("initcheck_worker.log"))
    merged = dedupe(a + b)
    assert [v.details["count"] for v in merged] == [6, 2, 2]


# -- attribution to cases --------------------------------------------------------------------------

def test_reports_between_the_markers_of_case_2_go_to_case_2_only():
    log = fixture("initcheck_worker.log")
    assert len(violations_in_log(log, 2, tool="initcheck")) == 3
    assert violations_in_log(log, 1) == [] and violations_in_log(log, 3) == []
    cases = attribute(log)
    assert {c: len(vs) for c, vs in cases.items()} == {None: 0, 1: 0, 2: 3, 3: 0}


def test_a_span_of_one_case_is_enough():
    log = fixture("initcheck_worker.log")
    span = log[log.index("@@fuzzrunner-case-begin 2@@"):log.index("@@fuzzrunner-case-begin 3@@")]
    assert [v.details["count"] for v in violations_in_log(span, 2)] == [3, 1, 1]
    assert violations_in_log(span, 3) == []


def test_reports_after_a_crash_go_to_the_case_that_was_running():
    log = fixture("crash_initcheck.log")
    assert violations_in_log(log, 1, tool="initcheck") == []
    uninit, error = violations_in_log(log, 2, tool="initcheck")
    assert uninit.kind == "uninitialized-read" and uninit.location == SHRINK_29
    assert error.kind == "sanitizer-error" and error.tool == "initcheck"
    assert "cudaErrorIllegalAddress" in error.message and error.details["count"] == 1  # the exit lines are not reports


def test_reports_after_the_last_end_marker_go_to_the_last_case_begun():
    report = ("========= Program hit cudaErrorLaunchFailure (error 719) on CUDA API call to cudaLaunchKernel.\n"
              "========= Error: process didn't terminate successfully\n")
    log = fixture("initcheck_worker.log").replace("========= ERROR SUMMARY", report + "========= ERROR SUMMARY")
    (v,) = violations_in_log(log, 3, tool="initcheck")
    assert v.kind == "sanitizer-error" and "cudaErrorLaunchFailure" in v.message


def test_tensor_lines_name_the_tensor_of_an_address():
    log = fixture("initcheck_worker.log").replace(
        "@@fuzzrunner-case-begin 2@@",
        "@@fuzzrunner-case-begin 2@@\n@@fuzzrunner-tensor meta.active_lora_ids 0x7f1e2a000200 12@@\n"
        "@@fuzzrunner-tensor meta.token_indices_sorted_by_lora_ids 0x7f1e2a000000 128@@")
    vs = {v.location.rsplit("/", 1)[-1]: v for v in violations_in_log(log, 2)}
    assert vs["lora_shrink.py:29"].tensor == "meta.active_lora_ids"
    assert vs["lora_shrink.py:29"].details["offset"] == 0
    assert vs["kernel_utils.py:60"].tensor == "meta.token_indices_sorted_by_lora_ids"
    assert vs["lora_expand.py:33"].tensor == "meta.active_lora_ids"
    assert violations_in_log(log, 1) == []


# -- the self-test ------------------------------------------------------------------------------

def test_self_test_without_a_gpu_says_so(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    ok, detail = self_test("initcheck")
    assert not ok and "no CUDA device" in detail
    ok, detail = self_test("racecheck")
    assert not ok and "initcheck, memcheck" in detail


def test_self_test_check_reads_the_planted_report():
    out = ("========= COMPUTE-SANITIZER\n"
           "========= Uninitialized __global__ memory read of size 4 bytes\n"
           "=========     at _planted_read+0x60 in /tmp/fuzzrunner-selftest-x/sanitizer_selftest.py:10\n"
           "=========     by thread (0,0,0) in block (0,0,0)\n"
           "=========     Address 0x7f00000000\n"
           "=========\nself-test script done\n========= ERROR SUMMARY: 1 error\n")
    ok, detail = check(out, "initcheck", "uninitialized-read", "sanitizer_selftest.py:10", "2025.3.1.0")
    assert ok and "2025.3.1.0" in detail
    ok, detail = check(out, "initcheck", "uninitialized-read", "sanitizer_selftest.py:11")
    assert not ok and "did not report" in detail


@pytest.mark.gpu
def test_self_test_on_a_gpu():
    try:
        find_sanitizer()
    except SanitizerNotFound as e:
        pytest.skip(str(e))
    for tool in ("initcheck", "memcheck"):
        ok, detail = self_test(tool)
        assert ok, detail


# -- the hub, with a fake compute-sanitizer --------------------------------------------------------

FAKE_SANITIZER = r'''
import os, subprocess, sys, time
cmd = sys.argv[sys.argv.index("--") + 1:]
out = sys.stdout.buffer
REPORT = (b"========= Uninitialized __global__ memory read of size 4 bytes\n"
          b"=========     at _lora_shrink_kernel+0x80 in lora_shrink.py:29\n"
          b"=========     by thread (0,0,0) in block (0,0,0)\n"
          b"=========     Address 0x7f1e2a000200\n"
          b"=========\n")
out.write(b"========= COMPUTE-SANITIZER\n")
out.flush()
child = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
marker = ("@@fuzzrunner-case-begin %s@@" % os.environ["FAKE_REPORT_CASE"]).encode()
for line in iter(child.stdout.readline, b""):
    out.write(line)
    if line.strip() == marker:
        time.sleep(float(os.environ.get("FAKE_RELAY_DELAY_S", "0")))  # a tool slow to print
        out.write(REPORT * 2)
    out.flush()
rc = child.wait()
if rc:
    time.sleep(0.5)  # the real tool also speaks after its target is gone
    out.write(b"========= Program hit cudaErrorIllegalAddress (error 700) due to \"an illegal memory access "
              b"was encountered\" on CUDA API call to cudaStreamSynchronize.\n"
              b"=========\n========= Error: process didn't terminate successfully\n"
              b"========= Target application returned an error\n")
out.write(b"========= ERROR SUMMARY: 2 errors\n")
out.flush()
sys.exit(rc)
'''

FAKE_TARGET = '''
import os
from fuzzrunner.target import Target


def run(case, ctx):
    for i, op in enumerate(case.ops):
        with ctx.op(i, op):
            if op["op"] == "die":
                os._exit(7)


TARGET = Target("fake_gpu", "does nothing, or dies on {'op': 'die'}", cases=lambda faults=(): None, run=run)
'''


def case(*ops) -> Case:
    return Case("fake_gpu", {}, tuple({"op": o} for o in ops))


@pytest.fixture
def sanitized_hub(tmp_path):
    (tmp_path / "fake_sanitizer.py").write_text(FAKE_SANITIZER)
    (tmp_path / "fake_target.py").write_text(FAKE_TARGET)

    def make(report_case: int, relay_delay_s: float = 0.0) -> Hub:
        spec = WorkerSpec(f"{tmp_path / 'fake_target.py'}:TARGET", Context.of("cpu", sanitizer="initcheck"),
                          wrapper=[sys.executable, str(tmp_path / "fake_sanitizer.py"), "--tool", "initcheck", "--"],
                          env={"FAKE_REPORT_CASE": str(report_case), "FAKE_RELAY_DELAY_S": str(relay_delay_s)})
        return Hub(spec, oracles=("invariants",), timeout_s=120)
    return make


@pytest.mark.parametrize("relay_delay_s", [0.0, 0.3])  # 0.3: the result comes well before the report
def test_hub_gives_the_report_to_the_case_that_caused_it(sanitized_hub, monkeypatch, relay_delay_s):
    with sanitized_hub(report_case=2, relay_delay_s=relay_delay_s) as hub:
        results = [hub.run(case("noop")) for _ in range(3)]
        assert [r.case_no for r in results] == [1, 2, 3]
        assert [len(r.violations) for r in results] == [0, 1, 0]
        (v,) = results[1].violations
        assert (v.tool, v.kind, v.kernel, v.location) == ("initcheck", "uninitialized-read", "_lora_shrink_kernel",
                                                          SHRINK_29)
        assert v.details["count"] == 2
        pid = hub.worker.proc.pid
        monkeypatch.setattr(hub_module, "LOG_CAP", 0)
        assert hub.run(case("noop")).violations == []
        assert hub.worker.proc.pid == pid and hub.restarts == 0  # a full log is cut; the worker goes on
        assert hub.worker.log_size() < 5000


def test_hub_gives_the_reports_after_a_death_to_the_case_that_died(sanitized_hub):
    with sanitized_hub(report_case=2) as hub:
        assert hub.run(case("noop")).violations == []
        r = hub.run(case("noop", "die"))
        assert r.crashed and r.case_no == 2
        kinds = {(v.tool, v.kind) for v in r.violations}
        assert kinds == {("worker", "crash"), ("initcheck", "uninitialized-read"), ("initcheck", "sanitizer-error")}
        error = next(v for v in r.violations if v.kind == "sanitizer-error")
        assert "cudaErrorIllegalAddress" in error.message
        again = hub.run(case("noop"))  # a fresh worker, its own count
        assert not again.crashed and again.violations == [] and hub.restarts == 1


@pytest.mark.parametrize("line", ["Error: process didn't terminate successfully",
                                  "Target application returned an error",
                                  "12 errors were skipped (error buffer overflow)",
                                  "Warning: Device backtrace buffer overflow, some frames may be missing"])
def test_the_tools_own_process_lines_are_never_a_finding(line):
    assert parse_text(f"========= {line}\n========= ERROR SUMMARY: 0 errors\n") == []


def test_a_gpu_worker_and_the_self_test_run_compiled_triton_from_a_process_that_interprets(monkeypatch):
    """A ``--device cpu`` process (or a user's shell) has ``TRITON_INTERPRET=1``: a GPU worker it starts, and
    doctor's sanitizer self-test script, once inherited it, so their kernels ran in the interpreter on the
    host, unseen by compute-sanitizer (doctor said the self-test FAILED on a machine whose sanitizer works).
    A CPU worker keeps it."""
    import subprocess

    from fuzzrunner.engine.hub import worker_environment
    from fuzzrunner.engine.plan import worker_spec
    from fuzzrunner.sanitizer import selftest
    from fuzzrunner.settings import Settings
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    gpu = worker_environment(worker_spec("reference_runner", Settings(), 0, Context.of("cuda")), "/tmp/hub.sock")
    cpu = worker_environment(worker_spec("reference_runner", Settings(), 0, Context.of("cpu")), "/tmp/hub.sock")
    assert "TRITON_INTERPRET" not in gpu and gpu["FUZZRUNNER_DEVICE"] == "cuda"
    assert cpu["TRITON_INTERPRET"] == "1" and cpu["CUDA_VISIBLE_DEVICES"] == ""
    seen: dict = {}

    def script(argv, env, **kwargs):
        seen.update(env)
        return subprocess.CompletedProcess(argv, 0, "", "")
    monkeypatch.setattr(selftest, "gpu_available", lambda: True)
    monkeypatch.setattr(selftest, "sanitizer_wrapper", lambda tool, sanitizer: (["compute-sanitizer"], {}))
    monkeypatch.setattr(selftest.subprocess, "run", script)
    ok, _ = selftest.self_test(sanitizer=type("Found", (), {"path": "compute-sanitizer", "version": "2025.3"})())
    assert not ok  # (nothing reported by the stand-in)
    assert "TRITON_INTERPRET" not in seen
