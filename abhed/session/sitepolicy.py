"""The site policy: settings the site's operator fixes for every user of the machine (issue 37).

The operator's config (session/config.py) belongs to the user who runs Abhed; the site policy belongs to
root. It is one file at a fixed path, /etc/abhed/policy.toml: no variable, flag or config names another
(a path the user could move would be a way around it), and a file that exists but that anyone except
root could have written stops every command (fail closed). Named "site policy" so it is not confused
with the approval `Policy` of abhed/gate, which decides single tool calls.

    [settings]              # set for every user and locked: the config file's shape
    sandbox.backend = "bwrap"
    checkpoints.enabled = true
    approval.deny = ["bash(curl:*)"]   # always in force; a user's deny rules are added, none removed

    [allowed]               # what a user may choose where the policy sets no value
    "approval.mode" = ["ask", "plan"]
    "model.endpoint" = ["http://gpu1.lan:8000/v1"]   # each URL of model.endpoints too
    "mcp.servers" = ["jira"]                         # a table: its names
    "mcp.servers.*.allow_hosts" = ["jira.lan:443"]   # a list: each entry

A locked key a user layer (config file, ABHED_* variable, flag) sets to another value, or a value outside
an allowed list, is refused naming the policy file, the key, where the value came from and what the
policy permits. Whenever a policy exists, sandbox backend "none" is refused unless the policy itself
sets or allows it. Applied by config.load to every command's settings; config's Settings is handed in
(`schema`), so this module sits below config and imports nothing of it.
"""

from __future__ import annotations

import json
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

# Fixed on purpose: see the module's docstring. Tests place a file here in a private mount namespace.
POLICY_PATH = Path("/etc/abhed/policy.toml")

# Tables the policy locks whole when it sets any of them: a user key beneath that the policy does not
# hold is refused too (an added audit sink would send the record elsewhere; an added MCP server is a
# new tool). Every other table is locked key by key.
WHOLE = ("audit", "mcp.servers")
# Lists the policy's entries stay in, whatever a user sets: the user's entries are added.
ADDITIVE = ("approval.deny",)
# An [allowed] list that also checks another key: endpoints37's model.endpoints (a list of URLs beside
# model.endpoint) is checked against the endpoints the policy permits.
ALSO_CHECKS = {"model.endpoint": ("model.endpoints",)}
FIX = ("Ask the site's operator to fix it: sudo chown root:root {path} {dir} && sudo chmod 0644 {path} && "
       "sudo chmod go-w {dir}. Abhed does not run while the site policy cannot be trusted.")


class PolicyError(Exception):
    """The site policy cannot be used, or a setting conflicts with it; the message says which and what to do."""


@dataclass
class SitePolicy:
    path: Path
    schema: Any  # config.Settings: what the keys name
    settings: dict[str, Any] = field(default_factory=dict)  # nested, as [settings] gives it
    allowed: dict[str, list[Any]] = field(default_factory=dict)  # dotted key (a * for any name) -> values
    locked: dict[str, Any] = field(default_factory=dict)  # dotted key -> the value it is locked to

    def describe(self) -> list[str]:
        """What the policy locks and permits, one line each (doctor, config show)."""
        lines = [f"{key} = {json.dumps(value)} (locked)" for key, value in self.locked.items()]
        lines += [f"{key}: one of {_listed(values)}" for key, values in self.allowed.items()]
        if "sandbox.backend" not in self.locked and "sandbox.backend" not in self.allowed:
            lines.append('sandbox.backend: never "none" (a policy forbids it unless it allows it)')
        return lines

    def permitted_modes(self, all_modes: tuple[str, ...]) -> tuple[str, ...]:
        if "approval.mode" in self.locked:
            return (self.locked["approval.mode"],)
        return tuple(m for m in all_modes if m in self.allowed.get("approval.mode", all_modes))

    def mode_refusal(self, mode: str, all_modes: tuple[str, ...]) -> str:
        return (f"The site policy {self.path} does not permit approval mode {mode!r} (key approval.mode): it "
                f"permits {_listed(self.permitted_modes(all_modes))}. Choose one of those.")

    def locks(self, dotted: str) -> bool:
        """Whether the policy locks `dotted` (itself, or a table locked whole that holds it)."""
        return any(dotted == key or dotted.startswith(key + ".") for key in self.locked)

    def annotate(self, dotted: str, source: str) -> str:
        """`abhed config show`'s note for a key: where its value comes from, and what the policy does to it."""
        if dotted in ADDITIVE and dotted in self.locked:
            return f"locked by the site policy {self.path}: its entries always apply, yours ({source}) are added"
        if self.locks(dotted):
            return f"locked by the site policy {self.path}"
        permitted = self.permits(dotted)
        if permitted is not None:
            return f"{source}; the site policy {self.path} permits only {_listed(permitted)}"
        if dotted == "sandbox.backend" and not self._none_permitted():
            return f'{source}; the site policy {self.path} forbids "none"'
        return source

    def permits(self, dotted: str) -> list[Any] | None:
        """The values an [allowed] list permits for `dotted` (a `*` matching any name), or None."""
        for key, values in self.allowed.items():
            for pattern in (key, *ALSO_CHECKS.get(key, ())):
                parts, mine = pattern.split("."), dotted.split(".")
                if len(parts) == len(mine) and all(p in ("*", m) for p, m in zip(parts, mine)):
                    return values
        return None

    def _none_permitted(self) -> bool:
        return self.locked.get("sandbox.backend") == "none" or "none" in self.allowed.get("sandbox.backend", [])


def read(schema: Any, path: Path = POLICY_PATH) -> SitePolicy | None:
    """The site policy at `path` (always POLICY_PATH in the product), its keys those of `schema`
    (config.Settings), None when there is none.
    PolicyError when it exists but root alone could not have written it, or cannot be read or parsed."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:  # unreadable, a symlink (ELOOP), a directory on the way that is not one...
        raise PolicyError(f"Cannot read the site policy {path}: {exc.strerror or exc}. It must be a regular file "
                          f"every user can read: sudo chmod 0644 {path} && sudo chmod 0755 {path.parent}. Abhed "
                          "does not run while a site policy exists that it cannot read.") from None
    try:
        _check_trusted(path, os.fstat(fd))  # before reading: a directory or a FIFO here is refused, not read
        data = _read_at_most(fd, 1024 * 1024 + 1)
    finally:
        os.close(fd)
    if len(data) > 1024 * 1024:
        raise PolicyError(f"The site policy {path} is larger than 1 MiB: it is not a policy file. Fix it.")
    import tomllib
    try:
        tree = tomllib.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise PolicyError(f"Cannot read the site policy {path}: {exc}. Ask the site's operator to fix it; "
                          "Abhed does not run while it is broken.") from None
    return _parse(path, tree, schema)


def _read_at_most(fd: int, limit: int) -> bytes:
    chunks: list[bytes] = []
    while (got := sum(map(len, chunks))) < limit:
        chunk = os.read(fd, limit - got)
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks)


def _check_trusted(path: Path, st: os.stat_result) -> None:
    """Root's alone, as the config's check_ownership asks it of the user's file, but root only: the
    policy binds the user, so a file the user (or anyone but root) could write binds nothing."""
    problems = [p for p in (_unsafe(path, st), _unsafe(path.parent, os.stat(path.parent))) if p]
    if not stat.S_ISREG(st.st_mode):
        problems.insert(0, f"{path} is not a regular file")
    if problems:
        raise PolicyError(f"Refusing to run: the site policy {path} could have been written by someone other than "
                          f"root ({'; '.join(problems)}). " + FIX.format(path=path, dir=path.parent))


def _unsafe(path: Path, st: os.stat_result) -> str | None:
    if st.st_uid != 0:
        return f"{path} is owned by uid {st.st_uid}, not root"
    host = _host_root()
    if host != 0:  # in a user namespace (`unshare -Ur`) a user's own file shows as root's
        return f"{path} is owned by the root of a user namespace ({host}), not the machine's root"
    if st.st_mode & 0o022:
        who = " and ".join(w for w, bit in (("its group", 0o020), ("every user", 0o002)) if st.st_mode & bit)
        return f"{path} is writable by {who} (mode {stat.S_IMODE(st.st_mode):04o})"
    return None


def _host_root() -> int | str:
    """The machine's uid that uid 0 here is (0 outside any user namespace), or why it is not known."""
    try:
        with open("/proc/self/uid_map", encoding="ascii") as handle:
            return root_in(handle.read())
    except (OSError, ValueError) as exc:  # fail closed: a root that cannot be told is not trusted
        return f"/proc/self/uid_map unreadable: {exc}"


def root_in(uid_map: str) -> int | str:
    """The uid of the machine that uid 0 maps to in `uid_map` (/proc/self/uid_map's text): 0, or a
    sentence naming the uid it is (ValueError when the text is not a uid map)."""
    for line in uid_map.splitlines():
        inside, outside, count = map(int, line.split())
        if inside <= 0 < inside + count:
            host = outside - inside
            return 0 if host == 0 else f"uid {host} of the machine"
    return "uid 0 is not mapped"


def _parse(path: Path, tree: dict[str, Any], schema: Any) -> SitePolicy:
    def bad(what: str) -> PolicyError:
        return PolicyError(f"The site policy {path} is not valid: {what}. Ask the site's operator to fix it; Abhed "
                           "does not run while it is broken.")
    unknown = set(tree) - {"settings", "allowed"}
    if unknown:
        raise bad(f"unknown table(s) {', '.join(sorted(unknown))} (a policy has [settings] and [allowed])")
    settings, allowed = tree.get("settings", {}), tree.get("allowed", {})
    if not isinstance(settings, dict) or not isinstance(allowed, dict):
        raise bad("[settings] and [allowed] must be tables")
    from pydantic import ValidationError
    try:
        schema.model_validate(settings)
    except ValidationError as exc:
        raise bad("[settings] " + "; ".join(f"{'.'.join(map(str, err['loc']))}: {err['msg']}"
                                            for err in exc.errors(include_url=False))) from None
    for key, values in allowed.items():
        if not isinstance(values, list) or not values:
            raise bad(f"[allowed] {key!r} must be a non-empty list of the values a user may choose")
        if _kind(schema, key) is None:
            raise bad(f"[allowed] {key!r} names no setting (dotted, as `abhed config show` prints them; * for any "
                      "name of a table such as mcp.servers)")
    return SitePolicy(path, schema, settings, allowed, dict(_leaves(settings, "")))


def _kind(schema: Any, dotted: str) -> Any:
    """The type of the setting `dotted` names in `schema` (every part a field of its section, `*` any
    key of a table), or None when it names none."""
    from pydantic import BaseModel
    kind: Any = schema
    for part in dotted.split("."):
        if isinstance(kind, type) and issubclass(kind, BaseModel):
            field_info = kind.model_fields.get(part)
            if field_info is None:
                return None
            kind = field_info.annotation
        elif getattr(kind, "__origin__", None) is dict:  # `*` or one name of the table
            kind = kind.__args__[1]
        else:
            return None
    return kind


def _normal(schema: Any, dotted: str, value: Any) -> Any:
    """`value` as the setting holds it (ABHED_CHECKPOINTS="1" is true), in JSON shape, to compare a user's
    value with the policy's; the value as given when it is not valid (validation says so later)."""
    from pydantic import TypeAdapter, ValidationError
    kind = _kind(schema, dotted)
    if kind is None:
        return value
    try:
        adapter: TypeAdapter[Any] = TypeAdapter(kind)
        return adapter.dump_python(adapter.validate_python(value), mode="json")
    except ValidationError:
        return value


def _leaves(tree: dict[str, Any], prefix: str) -> list[tuple[str, Any]]:
    """The locked keys of [settings]: its leaves, but a table in WHOLE is one key."""
    out: list[tuple[str, Any]] = []
    for key, value in tree.items():
        dotted = prefix + key
        if isinstance(value, dict) and dotted not in WHOLE:
            out += _leaves(value, dotted + ".")
        else:
            out.append((dotted, value))
    return out


def _get(tree: dict[str, Any], dotted: str) -> tuple[bool, Any]:
    for part in dotted.split("."):
        if not isinstance(tree, dict) or part not in tree:
            return False, None
        tree = tree[part]
    return True, tree


def _put(tree: dict[str, Any], dotted: str, value: Any) -> None:
    parts = dotted.split(".")
    for part in parts[:-1]:
        tree = tree.setdefault(part, {})
    tree[parts[-1]] = value


def _listed(values: Any) -> str:
    return ", ".join(json.dumps(v) for v in values)


Layer = tuple[Callable[[str], str], dict[str, Any]]  # (names where a dotted key came from, its tree)


def apply(policy: SitePolicy, layers: list[Layer], merged: dict[str, Any], defaults: dict[str, Any]) -> dict[str, Any]:
    """`merged` (the user's layers over each other) with the policy's settings in force. PolicyError when a
    layer sets a locked key to another value or a value the policy does not allow. `defaults`: the
    settings' defaults (JSON shape), for the keys no layer set."""
    for dotted, value in policy.locked.items():
        _refuse_changes(policy, layers, dotted, value)
    out = json.loads(json.dumps(merged))  # a copy: the layers stay as given
    for dotted, value in policy.locked.items():
        if dotted in ADDITIVE:
            found, mine = _get(out, dotted)
            value = list(dict.fromkeys([*value, *(mine if found and isinstance(mine, list) else [])]))
        _put(out, dotted, value)
    for key, values in policy.allowed.items():
        for checked in (key, *ALSO_CHECKS.get(key, ())):
            _check_allowed(policy, layers, out, defaults, checked, key, values)
    backend = _get(_overlay(defaults, out), "sandbox.backend")
    if backend[1] == "none" and not policy._none_permitted():
        where = _origin(layers, "sandbox.backend") or "the settings"
        raise PolicyError(f'The site policy {policy.path} forbids sandbox.backend "none" ({where} sets it): every '
                          "command runs in the sandbox on this machine. Remove that setting (the default, bwrap, "
                          "is permitted).")
    return out


def _refuse_changes(policy: SitePolicy, layers: list[Layer], dotted: str, value: Any) -> None:
    if dotted in ADDITIVE:
        return
    for name, tree in layers:
        found, mine = _get(tree, dotted)
        if found and _normal(policy.schema, dotted, mine) != _normal(policy.schema, dotted, value):
            _conflict(policy, f"locks {dotted} to {json.dumps(value)}", name(dotted), dotted, mine)
        if dotted in WHOLE:  # the user's keys beneath a table locked whole, and the table itself
            continue
        for prefix in _prefixes(dotted):  # the user sets the whole table that holds the key
            found, table = _get(tree, prefix)
            if found and not isinstance(table, dict):
                _conflict(policy, f"locks {dotted} to {json.dumps(value)}", name(prefix), prefix, table)


def _prefixes(dotted: str) -> list[str]:
    parts = dotted.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]  # pragma: no mutate  (from 0: "" is never a key)


def _conflict(policy: SitePolicy, rule: str, where: str, dotted: str, value: Any) -> None:
    raise PolicyError(f"The site policy {policy.path} {rule}; {where} sets {dotted} to {json.dumps(value)}. "
                      "Remove that setting: the site's operator decides this key (`abhed config show` marks the "
                      "locked ones).")


def _check_allowed(policy: SitePolicy, layers: list[Layer], out: dict[str, Any], defaults: dict[str, Any],
                   dotted: str, key: str, values: list[Any]) -> None:
    for concrete, value in _expand(_overlay(defaults, out), dotted):
        bad = [v for v in _members(value) if v not in values]
        if not bad:
            continue
        origin = _origin(layers, concrete)
        if origin is None and concrete in policy.locked:
            raise PolicyError(f"The site policy {policy.path} is not valid: it locks {concrete} to "
                              f"{json.dumps(value)}, which its own [allowed] {key!r} does not list. Ask the site's "
                              "operator to fix it.")
        if origin is None and _get(defaults, concrete) == (True, value) and not isinstance(value, (list, dict)):
            _put(out, concrete, values[0])  # a default the site does not permit: its first choice instead
            continue
        raise PolicyError(f"The site policy {policy.path} permits {key} to be only {_listed(values)}; "
                          f"{origin or 'the settings'} set{'s' if origin else ''} {concrete} to {json.dumps(value)} "
                          f"({_listed(bad)} not permitted). Choose one the policy permits.")


def _overlay(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """`over`'s keys over `base`'s, table by table (the settings in effect: defaults where nothing is set)."""
    out = dict(base)
    for key, value in over.items():
        out[key] = _overlay(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def _expand(tree: dict[str, Any], dotted: str) -> list[tuple[str, Any]]:
    """(concrete dotted key, value) for each key `dotted` matches in `tree` (`*`: every name of a table)."""
    found: list[tuple[str, Any]] = [("", tree)]
    for part in dotted.split("."):
        step: list[tuple[str, Any]] = []
        for prefix, node in found:
            if not isinstance(node, dict):
                continue
            names = list(node) if part == "*" else [part] if part in node else []
            step += [(f"{prefix}{name}.", node[name]) for name in names]
        found = step
    return [(prefix[:-1], value) for prefix, value in found]


def _members(value: Any) -> list[Any]:
    """What an allowed list is checked against: a list's entries, a table's names, else the value."""
    if isinstance(value, list):
        return value
    if isinstance(value, dict):
        return list(value)
    return [value]


def _origin(layers: list[Layer], dotted: str) -> str | None:
    """The last layer (the one in force) that sets `dotted`, named; None: a default. (A layer that sets a
    table holding it to a non-table fails validation afterwards.)"""
    for name, tree in reversed(layers):
        if _get(tree, dotted)[0]:
            return name(dotted)
    return None


def mode_refused(settings: Any) -> Callable[[str], str | None] | None:
    """For the gate's /mode (and `abhed tool --mode`): why a mode may not be chosen under the site
    policy `settings` were made under; None when there is no policy."""
    site: SitePolicy | None = settings.site_policy
    if site is None:
        return None
    from abhed.gate.modes import MODES
    return lambda mode: None if mode in site.permitted_modes(MODES) else site.mode_refusal(mode, MODES)
