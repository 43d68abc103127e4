"""Model profiles: what Abhed needs to know about a model family, one TOML file each in offline_models/.

A profile gives the context window and output cap, the tool-call format, sampling defaults and the
exact `vllm serve` command that serves the family with tool calling. The profile is chosen from the
id the server reports at /v1/models (the longest matching pattern wins, so `*deepseek-v3.1*` beats
`*deepseek-v3*`); the operator can name one instead (model.profile, --profile). A model no profile
matches gets the `generic` one, and the run says so.
"""

from __future__ import annotations

import tomllib
from fnmatch import fnmatchcase
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from abhed.common import formats

GENERIC = "generic"


class Sampling(BaseModel):
    model_config = ConfigDict(extra="forbid")

    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    repetition_penalty: float | None = None
    presence_penalty: float | None = None

    def fields(self) -> dict[str, float | int]:
        """Request fields for the values the profile sets (top_k and the rest are vLLM extensions)."""
        return {k: v for k, v in self.model_dump().items() if v is not None}


class Vision(BaseModel):
    """What a model that takes images takes: the [vision] table of its profile.

    `placement`: where the images of a tool result go. "tool": as parts of the tool message;
    "user": in a user message after the tool results, for servers and chat templates that refuse
    (or silently drop) anything but text in a tool message. `abhed doctor` tries both.
    """

    model_config = ConfigDict(extra="forbid")

    max_images: int = Field(4, ge=1, le=64)  # per request: vLLM's --limit-mm-per-prompt '{"image": N}'
    max_pixels: int = Field(1024 * 1024, ge=32 * 32)  # each image is downscaled to at most this many
    max_bytes: int = Field(8 * 1024 * 1024, ge=64 * 1024)  # of image data (base64) in one request
    placement: Literal["tool", "user"] = "user"


class Profile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    family: str
    match: list[str] = []  # case-insensitive globs over the served model id
    context_window: int = Field(ge=1024)  # used when the server does not report max_model_len
    max_output_tokens: int = Field(ge=256)
    tool_format: str = "native"  # a name in common/formats.py
    text_format: str = formats.DEFAULT_TEXT  # a text format there: when the server has no tool-call parser
    sampling: Sampling = Sampling()
    vision: Vision | None = None  # None: the model takes text only
    vllm_serve: str
    notes: str = ""

    @field_validator("tool_format", mode="before")
    @classmethod
    def _known_format(cls, value: object) -> str:
        return formats.validated(value)

    @field_validator("text_format", mode="before")
    @classmethod
    def _known_text_format(cls, value: object) -> str:
        return formats.validated(value, text=True)

    def score(self, model_id: str) -> int:
        """How specifically this profile matches `model_id`: the longest matching pattern, 0 if none."""
        lowered = model_id.lower()
        return max((len(p.replace("*", "")) for p in self.match if fnmatchcase(lowered, p.lower())), default=0)


class ProfileError(Exception):
    """A profile file is broken or a profile name is unknown; the message says which and why."""


def profile_files() -> list[tuple[str, str]]:
    """(file name, text) of every profile shipped in the offline_models package."""
    root = resources.files("offline_models")
    return sorted((entry.name, entry.read_text(encoding="utf-8")) for entry in root.iterdir()
                  if entry.name.endswith(".toml"))


def parse(name: str, text: str) -> Profile:
    try:
        return Profile.model_validate(tomllib.loads(text))
    except (tomllib.TOMLDecodeError, ValidationError) as exc:
        raise ProfileError(f"The model profile {name} is invalid: {exc}") from exc


def load(extra_dir: Path | None = None) -> dict[str, Profile]:
    """All profiles by name: the shipped ones, then the operator's from `extra_dir` (same name wins)."""
    files = profile_files()
    if extra_dir is not None and extra_dir.is_dir():
        files += sorted((p.name, p.read_text(encoding="utf-8")) for p in extra_dir.glob("*.toml"))
    profiles: dict[str, Profile] = {}
    for name, text in files:
        profile = parse(name, text)
        profiles[profile.name] = profile
    return profiles


def vision_for(profile: Profile, images: str = "auto", overrides: dict[str, Any] | None = None) -> Vision | None:
    """What images the model takes: the profile's [vision], as the operator's model.images says
    ("auto": the profile's; "on": the profile's, or the defaults when it has none; "off": none),
    with the operator's limits (model.max_images, ...) over the profile's."""
    if images == "off" or (images == "auto" and profile.vision is None):
        return None
    base = profile.vision or Vision()
    given = {key: value for key, value in (overrides or {}).items() if value is not None}
    return base.model_copy(update=Vision.model_validate({**base.model_dump(), **given}).model_dump())


def choose(model_id: str, profiles: dict[str, Profile], override: str | None = None) -> tuple[Profile, bool]:
    """The profile for `model_id` and whether it was matched (False: the generic fallback)."""
    if override:
        if override not in profiles:
            raise ProfileError(f"Unknown model profile {override!r}; the profiles are: {', '.join(sorted(profiles))} "
                               "(`abhed models` describes them).")
        return profiles[override], True
    best = max(profiles.values(), key=lambda p: p.score(model_id))
    if best.score(model_id) > 0:
        return best, True
    return profiles[GENERIC], False
