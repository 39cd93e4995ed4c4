"""SG1's patch, validated through the ``sglang_engine`` target: the integration test's ``SG1`` case (a pinned
adapter, a stream of base-model and a0 requests, a1 waiting past the drain threshold) on the set-up release,
unpatched (exit 1 expected: the drain check's state violation) or with sg1_drainer_ignores_pinned_slots.patch
applied in memory (``--patched``: exit 0 expected). Run from the repository root:

    python docs/findings/validate_sg1_patch.py [--patched]

The patch is applied with ``patch -p1`` to copies of the release's ``lora_drainer.py`` and ``scheduler.py``;
``lora_drainer.py`` is re-executed in its module and ``Scheduler.init_lora_drainer`` takes the patched body (the
target's scheduler object is made after this, with the patched method).
"""

import importlib
import pathlib
import shutil
import subprocess
import sys
import tempfile

import sglang_site

PATCH = pathlib.Path(__file__).with_name("sg1_drainer_ignores_pinned_slots.patch")
FILES = ("sglang/srt/lora/lora_drainer.py", "sglang/srt/managers/scheduler.py")


def apply(tree: pathlib.Path) -> None:
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="sg1-"))
    for f in FILES:
        (tmp / "python" / f).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(tree / f, tmp / "python" / f)
    subprocess.run(["patch", "-s", "-p1", "-d", str(tmp), "-i", str(PATCH)], check=True)
    mod = importlib.import_module("sglang.srt.lora.lora_drainer")
    clock = mod.time  # the target's round clock (targets/sglang_engine/scheduler.py), kept
    exec(compile((tmp / "python" / FILES[0]).read_text(), mod.__file__, "exec"), mod.__dict__)
    mod.time = clock
    sched = importlib.import_module("sglang.srt.managers.scheduler")
    sched.LoRADrainer = mod.LoRADrainer
    from sglang.srt.runtime_context import get_lora

    def init_lora_drainer(self):  # the patched body (scheduler.py:2400-2408 with the patch)
        if get_lora().lora_drain_wait_threshold > 0.0:
            self.lora_drainer = mod.LoRADrainer(get_lora().max_loras_per_batch, get_lora().lora_drain_wait_threshold,
                                                can_fit=self.tp_worker.model_runner.lora_manager.validate_lora_batch)
        else:
            self.lora_drainer = None
    sched.Scheduler.init_lora_drainer = init_lora_drainer


if __name__ == "__main__":
    sys.exit(sglang_site.exit_code(sglang_site.validate_patch,
                                   lambda t: (t.SG1_CFG, t.SG1), apply, "--patched" in sys.argv))
