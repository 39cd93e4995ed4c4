"""The engine's declared message vocabularies: every message travels and comes back as itself, a
channel refuses what it does not carry, and the start-up environment is one round trip."""

import socket

import pytest

from fuzzrunner.context import Context
from fuzzrunner.engine import events, protocol

SAMPLES = {
    protocol.Run: protocol.Run({"target": "t", "config": {}, "ops": []}, ["shadow"], True, 2.0),
    protocol.Exit: protocol.Exit(),
    protocol.Ready: protocol.Ready(12, "cpu"),
    protocol.Op: protocol.Op(3, "dummy_run"),
    protocol.Launch: protocol.Launch("lora_shrink", "runner.py:10"),
    protocol.Partial: protocol.Partial([{"tool": "shadow"}]),
    protocol.Waiting: protocol.Waiting(["loader"]),
    protocol.Late: protocol.Late(3, [{"tool": "python"}]),
    protocol.Result: protocol.Result([], 0.5, 7, fatal=True, lingering=[[6, ["loader"]]]),
    protocol.Invalid: protocol.Invalid("bad case", unsupported=True),
    protocol.TargetFailed: protocol.TargetFailed("target 't': its run returned a coroutine"),
    protocol.Harness: protocol.Harness("boom", "tb"),
    protocol.Fork: protocol.Fork("/tmp/s", "/tmp/log"),
    protocol.ZygoteReady: protocol.ZygoteReady(5),
    protocol.Forked: protocol.Forked(6),
    protocol.Exited: protocol.Exited(6, -9),
}
CHANNELS = (protocol.TO_WORKER, protocol.FROM_WORKER, protocol.TO_ZYGOTE, protocol.FROM_ZYGOTE)


@pytest.fixture
def pair():
    a, b = socket.socketpair()
    yield a, b
    a.close()
    b.close()


def test_every_declared_message_has_a_sample_and_travels_as_itself(pair):
    declared = {cls for channel in CHANNELS for cls in channel.values()}
    assert declared == set(SAMPLES)
    a, b = pair
    for channel in CHANNELS:
        for cls in channel.values():
            protocol.send(a, SAMPLES[cls])
            assert protocol.recv(b, channel) == SAMPLES[cls]


def test_a_channel_refuses_a_message_it_does_not_carry_and_a_malformed_one(pair):
    a, b = pair
    protocol.send(a, protocol.Run({}, None))
    with pytest.raises(ValueError, match="unexpected message 'run'"):
        protocol.recv(b, protocol.FROM_WORKER)
    protocol.send(a, protocol.Op(1, "x"))
    with pytest.raises(ValueError, match="unexpected message 'op'"):
        protocol.recv(b, protocol.TO_WORKER)
    a.sendall(protocol._HEADER.pack(len(b'{"type": "op"}')) + b'{"type": "op"}')  # its fields missing
    with pytest.raises(ValueError, match="malformed 'op' message"):
        protocol.recv(b, protocol.FROM_WORKER)


def test_the_start_up_environment_is_one_round_trip():
    context = Context("cuda", False, "device", "initcheck", "1")
    start = protocol.WorkerEnv("my.py:T", context, hub_socket="/tmp/s", parent=42, extra={"CUDA_LAUNCH_BLOCKING": "1"})
    env = start.environ({"PATH": "/bin"})
    assert env["PATH"] == "/bin" and env["CUDA_VISIBLE_DEVICES"] == "1" and env[protocol.PARENT_ENV] == "42"
    assert protocol.WorkerEnv.read(env) == protocol.WorkerEnv("my.py:T", context, "/tmp/s", 42)
    assert protocol.WorkerEnv.read({}).context == Context.of("cpu", interpreted=False)


def test_an_event_nobody_declared_is_refused_and_a_default_takes_the_rest():
    seen = []
    handlers = {events.ProgressEvent: seen.append}
    events.dispatch(handlers, events.ProgressEvent(1, 1, 0, 0.1, 0))
    with pytest.raises(ValueError, match="unexpected event 'warning'"):
        events.dispatch(handlers, events.WarningEvent("w"))
    events.dispatch(handlers, events.WarningEvent("w"), default=seen.append)
    assert [e.kind for e in seen] == ["progress", "warning"]
    with pytest.raises(ValueError, match="unexpected event 'news'"):
        events.Event.from_dict({"type": "news"})
