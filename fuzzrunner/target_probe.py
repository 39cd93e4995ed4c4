"""Whether a target loads, each in a process of its own: what ``fuzzrunner doctor --engines`` says of it.

Loading an engine target imports a whole vLLM or SGLang tree and leaves it in ``sys.modules``; one process
that loads every target in turn shows a target what the ones before it left there. So it was: the
``sglang_lora`` target's stub of ``sglang.srt.utils.hf_transformers_utils`` (a type name only) stayed in
place and ``sglang_engine``, loaded next, was reported "unavailable (cannot import name 'get_config')" on a
machine where it works. Here each target loads alone, as a campaign's workers load it:
``python -m fuzzrunner.target_probe SPEC`` prints one JSON object (its description and ``details``, or why it
is unavailable); a probe that crashes or runs past its timeout is said so in one line.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile

from .text import describe

TIMEOUT_S = 300.0  # importing vLLM or SGLang whole: 10-25 s alone, more beside the other probes on 2 cores


def probe(spec: str) -> dict:
    """``{"description", "details"}`` of target ``spec`` loaded in this process, or ``{"unavailable": why}``."""
    from .errors import FuzzrunnerError, TargetUnavailable
    from .target import load_target
    try:
        target = load_target(spec)
    except TargetUnavailable as e:
        return {"unavailable": str(e)}
    except FuzzrunnerError as e:  # a broken harness, a spec that names nothing
        return {"unavailable": f"it failed to load: {e}"}
    return {"description": target.description, "details": [str(d) for d in target.details],
            "features": len(target.feature_space)}


class Probe:
    """One target's probe, started now in a process of its own; ``result()`` waits for its verdict."""

    def __init__(self, spec: str, timeout_s: float | None = None):
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p))
        self.timeout_s, self.error, self.proc = TIMEOUT_S if timeout_s is None else timeout_s, "", None
        self.stderr = tempfile.TemporaryFile(mode="w+", encoding="utf-8", errors="replace")
        try:
            self.proc = subprocess.Popen([sys.executable, "-X", "faulthandler", "-m", "fuzzrunner.target_probe", spec],
                                         env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                         stderr=self.stderr, text=True, errors="replace", start_new_session=True)
        except OSError as e:
            self.error = f"its probe did not start: {describe(e)}"

    def result(self) -> dict:
        """The child's JSON object, or ``{"unavailable": one line}`` if it crashed, hung or said nothing."""
        try:
            return self._result()
        finally:
            self.stderr.close()

    def _result(self) -> dict:
        if self.proc is None:
            return {"unavailable": self.error}
        try:
            out, _ = self.proc.communicate(timeout=self.timeout_s)
        except subprocess.TimeoutExpired:
            self._kill()
            return {"unavailable": f"its probe (loading it in a process of its own) did not finish in "
                                   f"{self.timeout_s:g} s and was killed; `fuzzrunner check-target` shows where "
                                   f"it hangs"}
        lines = out.strip().splitlines()
        try:
            said = json.loads(lines[-1]) if lines else None
        except ValueError:
            said = None
        if self.proc.returncode == 0 and isinstance(said, dict):
            return said
        return {"unavailable": f"its probe (loading it in a process of its own) {self._ended()}{self._last_words()}"}

    def _ended(self) -> str:
        code = self.proc.returncode if self.proc is not None else None
        if code is not None and code < 0:
            try:
                return f"crashed ({signal.Signals(-code).name})"
            except ValueError:
                return f"crashed (signal {-code})"
        return f"ended with exit status {code} and no verdict"

    def _last_words(self) -> str:
        self.stderr.seek(0)
        tail = [ln.strip() for ln in self.stderr.read()[-20000:].splitlines() if ln.strip()]
        fatal = [ln for ln in tail if ln.startswith("Fatal Python error")]  # faulthandler's, above its stacks
        return f": {(fatal or tail)[-1][:200]}" if tail else ""

    def _kill(self) -> None:
        assert self.proc is not None
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)  # and whatever the import started
        except OSError:
            self.proc.kill()
        self.proc.communicate()


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m fuzzrunner.target_probe SPEC", file=sys.stderr)
        return 2
    result = probe(argv[0])
    sys.stdout.flush()
    print(json.dumps(result))  # the last line: whatever the import printed comes before it
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
