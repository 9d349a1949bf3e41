"""A model folder whose files are hostile (issue #40), as a browser meets it: a link or the
sidebar opening it gets one clear message naming the file, never an exception box. Before,
a config.json of `"[" * 200000 + "]" * 200000` raised RecursionError through
`ui.model_run.active_model` (which catches ValueError and the OS errors) and the page showed
Streamlit's redacted exception."""

from __future__ import annotations

import shutil

import pytest

from ui import models

from tests.app.conftest import APP, AppTest, allow_models, open_page
from tests.test_hostile_files import DEEP, write_folders

PROMPT = "Hostile folders are refused politely."
CASES = {  # name: (folder kind, file, content, words the message holds)
    "nested config.json": ("tfm", "config.json", DEEP, "config.json nests its JSON deeper than Python can read"),
    "nested tokenizer.json": ("hf", "tokenizer.json", DEEP, "tokenizer.json nests its JSON deeper"),
    "a huge number in config.json": (
        "tfm",
        "config.json",
        '{"format": "tfm", "version": 1e400}',
        "config.json holds a number tfm cannot read",
    ),
    "a 5000-digit number in config.json": (
        "tfm",
        "config.json",
        '{"version": ' + "9" * 5000 + "}",
        "config.json holds a number tfm cannot read",
    ),
    "config.json not UTF-8": ("tfm", "config.json", b'{"format": "\xff"}', "config.json is not UTF-8 text"),
}


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    return write_folders(tmp_path_factory.mktemp("folders"))


def hostile(folders, tmp_path, case: str):
    kind, file, content, words = CASES[case]
    folder = tmp_path / "models" / "bad"
    shutil.copytree(folders / kind, folder)
    (folder / file).write_bytes(content if isinstance(content, bytes) else content.encode())
    allow_models(tmp_path / "models")
    return folder, words


def shown_ids(at: AppTest) -> list[int]:
    return at.dataframe[0].value["id"].tolist()


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_link_to_a_hostile_folder_says_which_file_and_why(folders, tmp_path, case):
    folder, words = hostile(folders, tmp_path, case)
    at = AppTest.from_file(APP, default_timeout=120)
    at.query_params["model"], at.query_params["prompt"] = f"path:{folder}", PROMPT
    at.switch_page("pages/tokens.py").run()
    assert not at.exception, at.exception
    errors = [e.value.replace("\\", "") for e in at.error]
    assert any("Could not load model folder" in e and words in e for e in errors), errors


def test_the_sidebar_opening_a_hostile_folder_keeps_the_previous_model(folders, tmp_path):
    folder, words = hostile(folders, tmp_path, "nested config.json")
    at = open_page("tokens", PROMPT)
    default_ids = models.load_lm(models.default_model_spec(), "cpu").tokenizer.encode(PROMPT)
    assert shown_ids(at) == default_ids
    at.radio(key="sidebar.model_kind").set_value("folder").run()
    at.text_input(key="sidebar.folder").set_value(str(folder)).run()
    assert not at.exception, at.exception
    assert any(words in e.value.replace("\\", "") for e in at.error), [e.value for e in at.error]
    assert any("Still showing the previous model" in i.value for i in at.info)
    assert shown_ids(at) == default_ids
