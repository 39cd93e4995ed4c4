"""SG2's patch, validated through the ``sglang_engine`` target: the integration test's ``SG2`` case (the base model
and a0 each sending a 12-token request every second round, a1 waiting past the drain threshold) on the set-up
release, unpatched (exit 1 expected: the drain check's state violation, the drained adapter admitting requests
while draining) or with sg2_drain_budget_recomputed.patch applied in memory (``--patched``: exit 0 expected). Run
from the repository root:

    python docs/findings/validate_sg2_patch.py [--patched]

The patch is applied with ``patch -p1`` to a copy of the release's ``lora_drainer.py``, which is re-executed in its
module; the scheduler module's ``LoRADrainer`` name is rebound to the patched class (the target's scheduler object,
made after this, builds its drainer with SGLang's own ``init_lora_drainer``).
"""

import importlib
import pathlib
import shutil
import subprocess
import sys
import tempfile

import sglang_site

PATCH = pathlib.Path(__file__).with_name("sg2_drain_budget_recomputed.patch")
FILE = "sglang/srt/lora/lora_drainer.py"


def apply(tree: pathlib.Path) -> None:
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="sg2-"))
    (tmp / "python" / FILE).parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(tree / FILE, tmp / "python" / FILE)
    subprocess.run(["patch", "-s", "-p1", "-d", str(tmp), "-i", str(PATCH)], check=True)
    mod = importlib.import_module("sglang.srt.lora.lora_drainer")
    clock = mod.time  # the target's round clock (targets/sglang_engine/scheduler.py), kept
    exec(compile((tmp / "python" / FILE).read_text(), mod.__file__, "exec"), mod.__dict__)
    mod.time = clock
    importlib.import_module("sglang.srt.managers.scheduler").LoRADrainer = mod.LoRADrainer


if __name__ == "__main__":
    sys.exit(sglang_site.exit_code(sglang_site.validate_patch,
                                   lambda t: (t.SG2_CFG, t._sg2(12)), apply, "--patched" in sys.argv))
