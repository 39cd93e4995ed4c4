"""``scripts/vllm_setup.sh``'s stamp (targets/vllm_lora/install.py): a release set up before the set-up's module
list grew (vllm_engine's managers and runner mixin) gets what the new modules import, once; no vLLM needed."""

from fuzzrunner.target import _import_object

_import_object("targets.vllm_lora:vllm_available")  # puts the repository root (targets/) on sys.path

from targets.vllm_lora import install  # noqa: E402


def test_a_release_set_up_before_the_module_list_grew_is_topped_up_once(tmp_path, monkeypatch, capsys):
    root = tmp_path / "9.9.9"
    (root / "site" / "vllm-9.9.9.dist-info").mkdir(parents=True)
    (root / "deps").mkdir()
    (root / "ok").write_text("vllm-9.9.9-cp38-abi3-manylinux_2_31_x86_64.whl\n")  # the old stamp: the wheel only
    monkeypatch.setattr(install, "CACHE", tmp_path)
    monkeypatch.setattr(install, "site_dirs", lambda v: (tmp_path / v / "site", tmp_path / v / "deps"))
    monkeypatch.setattr(install, "requirements", lambda site: {})
    calls = []
    monkeypatch.setattr(install, "_top_up", lambda version, site, deps, reqs, env, imports: calls.append(imports))
    assert install.install("9.9.9") == root
    assert calls == [install.IMPORTS + install.ENGINE_IMPORTS]
    lines = (root / "ok").read_text().splitlines()
    assert lines[0].startswith("vllm-9.9.9-") and lines[1] == "imports " + ",".join(calls[0])
    assert "vllm.v1.worker.lora_model_runner_mixin" in calls[0]
    install.install("9.9.9")
    assert len(calls) == 1  # the stamp says it is done
    assert "ready" in capsys.readouterr().out


def test_the_engines_modules_failing_otherwise_leave_the_release_as_it_was(tmp_path, monkeypatch, capsys):
    def fails(*args, **kwargs):
        raise SystemExit("vllm_setup: importing the target's modules failed: ['TypeError: load_lib_module()']")
    monkeypatch.setattr(install, "_top_up", fails)
    install._engine_top_up("9.9.9", tmp_path, tmp_path, {}, {})  # no SystemExit
    assert "vllm_engine's modules left as they are" in capsys.readouterr().out
