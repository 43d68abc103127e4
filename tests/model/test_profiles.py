"""Model profiles: every shipped file loads, ids pick the right family, the files ship as package data."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from abhed.model import profiles

REPO = Path(__file__).resolve().parents[2]

FAMILIES = {
    "Qwen/Qwen2.5-Coder-32B-Instruct": "qwen2.5-coder",
    "Qwen/Qwen2.5-Coder-7B-Instruct-AWQ": "qwen2.5-coder",
    "Qwen/Qwen3-Coder-30B-A3B-Instruct": "qwen3-coder",
    "Qwen/Qwen3-Coder-480B-A35B-Instruct-FP8": "qwen3-coder",
    "meta-llama/Llama-3.3-70B-Instruct": "llama-3",
    "meta-llama/Meta-Llama-3.1-8B-Instruct": "llama-3",
    "openai/gpt-oss-20b": "gpt-oss",
    "deepseek-ai/DeepSeek-V3-0324": "deepseek-v3",
    "deepseek-ai/DeepSeek-V3.1": "deepseek-v3.1",
    "mistralai/Devstral-Small-2507": "devstral",
    "mistralai/Mistral-Small-3.2-24B-Instruct-2506": "mistral-small",  # the vision model: a profile of its own
    "mistralai/Mistral-Small-24B-Instruct-2501": "devstral",  # Mistral Small 3.0 takes text only
    "mistralai/Mistral-Large-Instruct-2411": "devstral",
    "Qwen/Qwen2.5-VL-72B-Instruct-AWQ": "qwen2.5-vl",
    "Qwen/Qwen3-VL-235B-A22B-Instruct": "qwen3-vl",
    "meta-llama/Llama-4-Scout-17B-16E-Instruct": "llama-4",
    "google/gemma-3-27b-it": "gemma-3",
}


VISION = {"qwen2.5-vl": "user", "qwen3-vl": "tool", "mistral-small": "user", "llama-4": "user", "gemma-3": "user"}


def test_vision_profiles_say_how_many_images_where_and_serve_with_that_limit():
    loaded = profiles.load()
    assert {name for name, p in loaded.items() if p.vision} == set(VISION)
    for name, placement in VISION.items():
        vision = loaded[name].vision
        assert vision.placement == placement
        assert f'--limit-mm-per-prompt \'{{"image": {vision.max_images}' in loaded[name].vllm_serve


def test_the_operator_turns_images_on_or_off_and_overrides_the_limits():
    loaded = profiles.load()
    assert profiles.vision_for(loaded["qwen2.5-coder"]) is None
    assert profiles.vision_for(loaded["qwen2.5-coder"], "on") == profiles.Vision()  # the defaults
    assert profiles.vision_for(loaded["qwen3-vl"], "off") is None
    mine = profiles.vision_for(loaded["qwen3-vl"], "auto", {"max_images": 2, "max_pixels": None, "placement": "user"})
    assert (mine.max_images, mine.max_pixels, mine.placement) == (2, 1048576, "user")
    with pytest.raises(ValueError):
        profiles.vision_for(loaded["qwen3-vl"], "auto", {"max_images": 0})


@pytest.mark.parametrize("model_id,name", sorted(FAMILIES.items()))
def test_the_served_id_picks_the_family(model_id, name):
    chosen, matched = profiles.choose(model_id, profiles.load())
    assert chosen.name == name and matched


def test_an_unknown_id_gets_the_generic_profile_and_an_override_wins():
    loaded = profiles.load()
    assert profiles.choose("my-finetune", loaded) == (loaded["generic"], False)
    assert profiles.choose("my-finetune", loaded, "qwen3-coder")[0].name == "qwen3-coder"
    with pytest.raises(profiles.ProfileError, match="Unknown model profile 'nope'; the profiles are: deepseek-v3"):
        profiles.choose("x", loaded, "nope")


def test_every_profile_has_the_vllm_tool_flags_and_the_families_the_issue_names():
    loaded = profiles.load()
    assert {"qwen2.5-coder", "qwen3-coder", "llama-3", "gpt-oss", "deepseek-v3", "devstral"} <= set(loaded)
    for profile in loaded.values():
        assert profile.vllm_serve.startswith("vllm serve ")
        assert "--enable-auto-tool-choice" in profile.vllm_serve and "--tool-call-parser" in profile.vllm_serve
        assert profile.max_output_tokens < profile.context_window
    parsers = {name: loaded[name].vllm_serve.split("--tool-call-parser ")[1].split()[0] for name in loaded}
    assert parsers["qwen2.5-coder"] == "hermes" and parsers["qwen3-coder"] == "qwen3_coder"
    assert parsers["llama-3"] == "llama3_json" and parsers["gpt-oss"] == "openai"
    assert parsers["deepseek-v3"] == "deepseek_v3" and parsers["devstral"] == "mistral"
    assert loaded["qwen3-coder"].text_format == "qwen3_coder"


def test_a_broken_profile_names_the_file(tmp_path):
    (tmp_path / "bad.toml").write_text('name = "bad"\nfamily = "x"\ncontext_window = 10\n')
    with pytest.raises(profiles.ProfileError, match="bad.toml is invalid"):
        profiles.load(tmp_path)


def test_operator_profiles_add_to_and_override_the_shipped_ones(tmp_path):
    (tmp_path / "mine.toml").write_text('name = "mine"\nfamily = "Mine"\nmatch = ["*mine*"]\ncontext_window = 8192\n'
                                        'max_output_tokens = 1024\nvllm_serve = "vllm serve mine"\n')
    loaded = profiles.load(tmp_path)
    assert profiles.choose("org/mine-7b", loaded)[0].name == "mine" and "qwen3-coder" in loaded


def test_profile_files_ship_as_package_data():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    setuptools = project["tool"]["setuptools"]
    assert "offline_models" in setuptools["packages"]["find"]["include"]
    assert setuptools["package-data"]["offline_models"] == ["*.toml"]
    shipped = {name for name, _ in profiles.profile_files()}
    assert shipped == {p.name for p in (REPO / "offline_models").glob("*.toml")}
