"""``caller_line`` (fuzzrunner/oracles/shadow/locations.py) classifies each frame's file once (a table
keyed by file name): the table must answer what the scan of NOT_CALLERS answers, for any path."""

from hypothesis import given, settings
from hypothesis import strategies as st

from fuzzrunner.oracles.shadow import locations

_PARTS = st.sampled_from(["/torch/", "/triton/", "/numpy/", "/fuzzrunner/oracles/", "/fuzzrunner/tracking.py",
                          "/contextlib.py", "/threading.py", "/site/", "/user/", "model.py", "\\torch\\", "x"])
_NAMES = st.one_of(st.lists(_PARTS, max_size=4).map("".join),
                   st.sampled_from(["<string>", "<eval_with_key>.3", "<frozen runpy>", "C:\\torch\\ops.py"]))


@settings(max_examples=300, deadline=None)
@given(_NAMES)
def test_the_file_table_answers_what_the_scan_answers(name):
    path = name.replace("\\", "/")
    want = (3 if path.startswith("<eval_with_key>") else 2) if path.startswith("<") else \
        1 if any(s in path for s in locations.NOT_CALLERS) else 0
    for _ in range(2):  # first computed, then from the table
        assert locations._kind(name) == (path, want)


def test_the_table_stays_small(monkeypatch):
    monkeypatch.setattr(locations, "_KINDS", {})
    for i in range(20005):
        locations._kind(f"<eval_with_key>.{i}")
    assert len(locations._KINDS) <= 20001


def test_the_caller_is_the_first_frame_outside_torch_and_the_oracles():
    def user():
        return locations.caller_line(1)
    assert user() == (__file__.replace("\\", "/"), user.__code__.co_firstlineno + 1)
