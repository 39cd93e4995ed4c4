"""The run's context, decided once: the device, Triton's mode, the shadow oracle's mode, the sanitizer, the GPU.

``Context.resolve(settings)`` decides it where a run is planned (``engine.campaign.plan_campaign``,
``engine.replay.Replayer``, ``fuzzrunner.replay``) from the settings and what is here, and the answer is
passed down as a parameter: ``CampaignPlan.context``, ``WorkerSpec.context``, ``RunContext.context`` (a
target's ``ctx``), ``OracleSpec.make(context)``, a target's ``cases(..., device=)``; the result, the report
and each finding record it. It is serialized for a child process in one place, the worker's start-up
environment (``engine.protocol.WorkerEnv``). The environment is only a front end's default
(``env_defaults``) and, for a device left open, this process's own set-up (``_env``); nothing below the
front ends reads a decision back out of ``os.environ``.

Standard library only (``_env`` imports torch only to look for a GPU), so every layer can take it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any

from . import _env
from .errors import DeviceUnavailable, InvalidArgument

DEVICES = ("cpu", "cuda")
SHADOW_MODES = ("device", "cpu")   # the shadow oracle's modes (docs/shadow.md)


def default_shadow(device: str, interpreted: bool) -> str:
    """The shadow oracle's mode unless one is forced: the device mode with compiled Triton on a GPU (it
    instruments the kernels), else the CPU oracle (it hooks Triton's interpreter and torch dispatch)."""
    return "device" if device == "cuda" and not interpreted else "cpu"


@dataclass(frozen=True)
class Context:
    device: str                  # "cpu" | "cuda": where the run's tensors and kernels are
    interpreted: bool            # Triton runs in its interpreter (a CPU run); compiled on a GPU
    shadow: str                  # "cpu" | "device": the shadow oracle's mode (SHADOW_MODES)
    sanitizer: str = "none"      # compute-sanitizer's tool around the worker, or "none"
    gpu: str | None = None       # the GPU a worker was placed on, as CUDA_VISIBLE_DEVICES names it (an index or a
    #                              MIG UUID); None on the CPU or before placement. Inside the worker it is cuda:0.

    def __post_init__(self):
        if self.device not in DEVICES:
            raise InvalidArgument(f"device={self.device!r} must be one of {', '.join(DEVICES)}.")
        if self.shadow not in SHADOW_MODES:
            raise InvalidArgument(f"shadow={self.shadow!r} must be one of {', '.join(SHADOW_MODES)}.")

    @classmethod
    def resolve(cls, settings: Any, *, on_cluster: bool = False, asked_as: str | None = None,
                in_process: bool = False) -> Context:
        """The context of a run under ``settings`` (its ``device``, ``sanitizer``, ``shadow``), decided here.

        The device: the settings', else this process's (a GPU if one is visible); a sanitizer means
        ``cuda``. On a Ray cluster (``on_cluster``) the GPUs and compute-sanitizer are the nodes' business:
        nothing is checked here. Elsewhere ``cuda`` needs a visible GPU (``DeviceUnavailable``: ``asked_as``
        is how the user asked, such as ``--device cuda``), and a sanitizer its executable
        (``SanitizerNotFound``). Workers run Triton's interpreter on the CPU and compiled Triton on a GPU;
        ``in_process``: the run is in this process, which runs Triton as it was set up at import (``_env``).
        The shadow mode: the settings', else the device's default (``default_shadow``)."""
        device = _device(settings.device, settings.sanitizer, on_cluster, asked_as)
        interpreted = _env.interpreted() if in_process else device != "cuda"
        return cls.of(device, interpreted=interpreted, shadow=settings.shadow, sanitizer=settings.sanitizer)

    @classmethod
    def of(cls, device: str, *, interpreted: bool | None = None, shadow: str | None = None,
           sanitizer: str = "none", gpu: str | None = None) -> Context:
        """A context on ``device``, nothing checked (tests, and the shorthand ``run_case(device=...)``):
        ``interpreted`` by default as a worker runs it (on the CPU), ``shadow`` the default for the two."""
        interpreted = device != "cuda" if interpreted is None else interpreted
        return cls(device, interpreted, shadow or default_shadow(device, interpreted), sanitizer, gpu)

    @classmethod
    def cpu_check(cls, settings: Any) -> Context:
        """The context of a CPU run of a GPU campaign's case (the pre-check, triage): Triton's interpreter,
        no sanitizer, the shadow mode the settings force or else the CPU's."""
        return cls.of("cpu", shadow=settings.shadow)

    def placed(self, gpu: str | None) -> Context:
        """This context on one GPU (``gpu`` as CUDA_VISIBLE_DEVICES names it; None: the process's own)."""
        return replace(self, gpu=gpu if self.device == "cuda" else None)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Any) -> Context | None:
        """A recorded context (a finding's, a report's), or None where there is none or it is unreadable
        (a file edited by hand, or from before contexts were recorded)."""
        if not isinstance(d, dict) or d.get("device") not in DEVICES or d.get("shadow") not in SHADOW_MODES:
            return None
        gpu = d.get("gpu")
        sanitizer = d.get("sanitizer")
        return cls(d["device"], bool(d.get("interpreted", d["device"] != "cuda")), d["shadow"],
                   sanitizer if isinstance(sanitizer, str) and sanitizer else "none",
                   gpu if isinstance(gpu, str) and gpu else None)


def _device(requested: str | None, sanitizer: str, on_cluster: bool, asked_as: str | None) -> str:
    wants_gpu = requested == "cuda" or sanitizer != "none"
    if on_cluster and (requested is not None or wants_gpu):
        return requested or "cuda"
    if not wants_gpu:
        return requested or _env.device_type()
    if not _env.cuda_present():
        need = asked_as or (f"compute-sanitizer --tool {sanitizer}" if sanitizer != "none" else "device 'cuda'")
        reads = sanitizer in ("none", "initcheck", "memcheck")
        instead = ("the shadow oracle checks the same reads in Triton's interpreter" if reads
                   else "nothing on the CPU checks what it checks (races and barriers inside a launch)")
        raise DeviceUnavailable(f"{need} needs a CUDA GPU and none is visible here; on the CPU drop it: {instead}.")
    if sanitizer != "none":
        from .sanitizer.locate import find_sanitizer  # standard library only: before any worker starts
        find_sanitizer()
    return "cuda"
