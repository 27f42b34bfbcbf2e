"""The documents say what the code does: every configuration error shown is the one ``Config`` raises, every
variable ``Config`` reads is documented, the README stays short and every relative link resolves."""

from __future__ import annotations

import doctest
import importlib
import re
from pathlib import Path

import pytest

from dashboard import access
from streaming.schema.config import Config, ConfigError

ROOT = Path(__file__).resolve().parent.parent


def config_source() -> str:
    """The configuration's code as one text: every module of ``streaming/schema/config/``."""
    return "\n".join(p.read_text() for p in sorted((ROOT / "streaming" / "schema" / "config").glob("*.py")))


ROW = re.compile(r"^\| `([A-Z_]+)` \|(.*)\|$")
EXAMPLE = re.compile(r"`([A-Z_]+)=([^`]*)`: (.*)$")
ACCESS_VARS = {v for v in vars(access).values() if isinstance(v, str) and v.startswith("DASHBOARD_")}
"""The dashboard's sign-in and roles, read by ``wm-dashboard`` (``dashboard/access.py``), not by ``Config``."""
SIGNED_IN = {access.METADATA_URL: "https://id.example.com/.well-known/openid-configuration",
             access.CLIENT_ID: "wm-dashboard", access.CLIENT_SECRET: "s", access.COOKIE_SECRET: "c" * 32,
             access.REDIRECT_URI: "https://wm.example.com/oauth2callback"}
"""A valid sign-in, beside which each documented mistake is made."""


def config_rows() -> dict[str, list[str]]:
    rows = {}
    for line in (ROOT / "docs" / "configuration.md").read_text().splitlines():
        m = ROW.match(line)
        if m:
            rows[m.group(1)] = [c.strip() for c in re.split(r"(?<!\\)\|", m.group(2))]
    return rows


@pytest.mark.parametrize(("var", "cells"), sorted(config_rows().items()))
def test_each_documented_error_is_the_one_config_raises(var: str, cells: list[str]) -> None:
    invalid = cells[-1]
    if invalid == "—":
        return
    m = EXAMPLE.match(invalid)
    assert m is not None and m.group(1) == var, invalid
    if var in ACCESS_VARS:
        env = {**SIGNED_IN, var: m.group(2)}
        with pytest.raises(access.AccessError) as err:
            access.SignIn.from_env(env)
            access.Operators.from_env(env)
    else:
        with pytest.raises(ConfigError) as err:
            Config.from_env({var: m.group(2)})
    assert str(err.value) == m.group(3).replace("\\|", "|")


def test_every_variable_config_reads_is_documented() -> None:
    source = config_source()
    read = set(re.findall(r'env(?:\.get)?\(?\s*\[?"([A-Z_]+)"', source)) | set(
        re.findall(r'_(?:int|duration|optional_duration|switch)\(env, "([A-Z_]+)"', source))
    assert read and read <= set(config_rows()), sorted(read - set(config_rows()))
    assert ACCESS_VARS <= set(config_rows()), sorted(ACCESS_VARS - set(config_rows()))


def test_the_readme_is_short_and_every_relative_link_resolves() -> None:
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 120
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", doc.read_text()):
            assert (doc.parent / target).exists(), f"{doc.relative_to(ROOT)} links to a missing {target}"


SAMPLE = 7901
"""The first of the numbers a built key is given as its arguments (a shard, a batch, a day): each is told apart from
the key's own words and becomes ``{}``."""


def schema_keys() -> dict[str, str]:
    """Every key ``KeySchema`` builds, by its property or method, as a pattern: built under namespace ``wm`` with a
    distinct sample for each argument (``{server}`` for a name, a number from ``SAMPLE`` for a number), then the
    namespace written ``{ns}`` and every argument ``{}``."""
    import inspect
    import typing

    from streaming.schema import keys
    from streaming.schema.keys import KeySchema, WindowKey

    schema, numbers, built = KeySchema("wm"), iter(range(SAMPLE, SAMPLE + 99)), {}
    for name, attr in vars(KeySchema).items():
        if name.startswith(("_", "parse_")) or not (isinstance(attr, property) or callable(attr)):
            continue
        if isinstance(attr, property):
            key = attr.fget(schema)
        else:
            hints = typing.get_type_hints(attr, vars(keys))
            args = {p: WindowKey(next(numbers), next(numbers), "{server}") if hints[p] is WindowKey
                    else next(numbers) if hints[p] is int else f"{{{p}}}"
                    for p in list(inspect.signature(attr).parameters)[1:]}
            key = attr(schema, **args)
        assert key.startswith("wm:"), (name, key)
        built[name] = "{ns}" + re.sub(r"\b79\d\d\b|\{[a-z_]+\}", "{}", key.removeprefix("wm"))
    return built


def key_patterns(names: set[str]) -> set[str]:
    """Documented key names with their placeholders (``{start_ms}``, ``{g}``) written ``{}``, as ``schema_keys``."""
    return {re.sub(r"\{(?!ns\})[^}]*\}", "{}", name) for name in names}


def test_the_architecture_key_table_lists_every_key_the_schema_builds() -> None:
    """Issue 64: docs/architecture.md's Redis key table lists exactly the keys ``KeySchema`` builds, each property and
    method called (a key added to the schema and not to the table fails here, and a row the schema no longer builds).
    A lane's keys are its namespace's, ``{ns}.{lane}:*``: the same keys, not rows of their own."""
    built = schema_keys()
    assert {"events", "input_shard", "window", "online_group", "history", "producer"} <= set(built)
    doc = set(re.findall(r"^\| `(\{ns\}[^`]*)`", (ROOT / "docs" / "architecture.md").read_text(), re.M))
    documented = key_patterns(doc - {"{ns}.{lane}:*"})
    assert len(documented) == len(doc) - 1, "two rows name one key"
    missing = {name: key for name, key in built.items() if key not in documented}
    assert not missing, f"KeySchema builds keys docs/architecture.md does not list: {missing}"
    assert documented <= set(built.values()), sorted(documented - set(built.values()))


def test_the_schemas_own_table_names_the_same_keys() -> None:
    """``streaming.schema.keys``' docstring table names every key ``KeySchema`` builds too; the input's shards and
    their trimmed counts are told in the ``{ns}:events`` and ``{ns}:trimmed`` rows."""
    built = schema_keys()
    shards = {built["input_shard"], built["trimmed_of"]}
    code = set(re.findall(r"^``(\{ns\}[^`]*)``", (ROOT / "streaming" / "schema" / "keys.py").read_text(), re.M))
    assert key_patterns(code) == set(built.values()) - shards


def test_the_glossary_has_at_most_fifteen_terms() -> None:
    """Issue 64: the glossary is the few words a reader needs, one idea each; a sixteenth term means merging two
    (the delay is said in the watermark's row, the hand-off in the follower's)."""
    terms = re.findall(r"^\| \*\*([^*]+)\*\* \|", (ROOT / "docs" / "glossary.md").read_text(), re.M)
    assert 10 <= len(terms) <= 15, terms
    assert len(set(terms)) == len(terms), terms


LAST_LONG_SUBJECT = "5fc47ff"
"""The last commit whose subject ran past 72 characters (issue 45, item 6): history is not rewritten; every commit
after it keeps its subject short, with the details in the body."""


def test_commit_subjects_after_issue_45_fit_72_characters() -> None:
    import subprocess

    known = subprocess.run(["git", "cat-file", "-e", f"{LAST_LONG_SUBJECT}^{{commit}}"], cwd=ROOT, capture_output=True)
    if known.returncode != 0:
        pytest.skip(f"no git history here with {LAST_LONG_SUBJECT} (an export or a shallow clone)")
    subjects = subprocess.run(["git", "log", "--format=%s", f"{LAST_LONG_SUBJECT}..HEAD"], cwd=ROOT, check=True,
                              capture_output=True, text=True).stdout.splitlines()
    assert subjects, "no commit after the last long subject: the range is wrong"
    long = [s for s in subjects if len(s) > 72]
    assert not long, long


def config_reads() -> set[str]:
    source = config_source()
    return set(re.findall(r'env(?:\.get)?\(?\s*\[?"([A-Z_]+)"', source)) | set(
        re.findall(r'_(?:int|duration|optional_duration|switch|lane_list)\(env, "([A-Z_]+)"', source))


def as_set(value: str) -> str:
    """A default as the docs write it ("30 s", "5 minutes", "1,000", "`wm`") as a variable's value."""
    value = value.strip("`").replace(",", "")
    value = re.sub(r"^(\d+(?:\.\d+)?) ?(minutes?|min)$", r"\1m", value)
    return re.sub(r"^(\d+(?:\.\d+)?) (ms|s|h|days?)$", r"\1\2", value).removesuffix("days").removesuffix("day")


TABLE_DEFAULTS = {var: cells[0].strip("`") for var, cells in config_rows().items()
                  if re.fullmatch(r"`[^`]*`", cells[0]) and var in config_reads()}


@pytest.mark.parametrize(("var", "default"), sorted(TABLE_DEFAULTS.items()))
def test_every_default_in_the_configuration_table_is_configs(var: str, default: str) -> None:
    """Issue 65: the table's default column, set as it is written, changes nothing: the delay (`30s`), the timeout,
    the trigger (`500ms`), every one. A default that names another variable (`SLIDE`: `WINDOW`) is that one's."""
    value = re.sub(r"\$?\b([A-Z][A-Z_]+)\b", lambda m: TABLE_DEFAULTS[m.group(1)], default)
    assert Config.from_env({var: value}) == Config.from_env({}), (var, default)


DEFAULT_IN_PROSE = re.compile(r"`([A-Z][A-Z_]+)`\**(?:,| \()(?: ?default)? ?(\d+(?:,\d{3})*(?:\.\d+)?(?!,?\d)"
                              r"(?: ?(?:ms|s|min|minutes|h|days))?|`[^`A-Z]+`)(?: by default)?(?:[,)]| a\b)")
"""A variable's default said in passing: "`WATERMARK_DELAY` (30 s by default)", "`MAX_FUTURE_SKEW`** (default 5
minutes)", "`RETIRE_AFTER`, 10 min", "`NEW_SERVERS_PER_MINUTE` (1,000)", "`PIPELINE_NAMESPACE` (default `wm`".
Not in benchmarks.md: it records runs, each with the settings it ran with."""


def test_every_default_said_in_passing_is_configs() -> None:
    """Issue 65: every default a page states beside a variable Config reads, set as the page says it, changes
    nothing. (docs/ingest.md once said 10 minutes of delay where the job used 30 s.)"""
    reads = config_reads()
    pages = [p for p in [ROOT / "README.md", *(ROOT / "docs").glob("*.md")] if p.name != "benchmarks.md"]
    said = [(doc.name, var, text) for doc in pages
            for var, text in DEFAULT_IN_PROSE.findall(re.sub(r"\s*\n\s*", " ", doc.read_text())) if var in reads]
    assert {var for _doc, var, _text in said} >= {"WATERMARK_DELAY", "ONLINE_TIMEOUT", "RETIRE_AFTER",
                                                  "MAX_FUTURE_SKEW", "PIPELINE_NAMESPACE"}, said
    wrong = [(doc, var, text) for doc, var, text in said
             if Config.from_env({var: as_set(text)}) != Config.from_env({})]
    assert wrong == []


def test_the_lanes_and_the_trigger_as_the_docs_state_them() -> None:
    """Issue 65: no lane unless asked (Config), the demo's two as ``./run.sh`` starts them (the Procfile), an idle
    lane's timeout, and what the trigger's default makes of the batch records kept."""
    from streaming.schema.config import DEFAULT_IDLE_TIMEOUT_MS

    config = (ROOT / "docs" / "configuration.md").read_text()
    demo = re.search(r"LAB_LANES=\$\{LAB_LANES-([a-z,-]+)\}", (ROOT / "Procfile").read_text())
    assert Config.from_env({}).lanes == () and demo is not None
    assert f"unset: none (`./run.sh`: `{demo.group(1)}`)" in config
    assert f"The demo runs `{demo.group(1)}`; production runs none" in (ROOT / "docs" / "operations.md").read_text()
    assert f"idle lanes default to `{DEFAULT_IDLE_TIMEOUT_MS // 1000}s`" in config
    lab = (ROOT / "docs" / "lab.md").read_text()
    assert f"`IDLE_TIMEOUT` (default {DEFAULT_IDLE_TIMEOUT_MS // 1000} s here)" in lab
    minutes = re.search(r"about (\d+) minutes at the default trigger", config)
    defaults = Config.from_env({})
    assert minutes and int(minutes.group(1)) == defaults.progress_history * defaults.trigger_ms // 60_000


def test_every_page_and_its_address_is_listed_as_the_app_serves_it() -> None:
    """Issue 65: the pages' addresses are in docs/dashboard.md, each as ``dashboard.app.PAGES`` serves it (Live ops,
    the default page, at the root)."""
    from dashboard.app import PAGES

    text = (ROOT / "docs" / "dashboard.md").read_text()
    listed = dict(re.findall(r"^\| ([A-Z][^|]+?) \| `(/[a-z]*)` \|", text, flags=re.MULTILINE))
    served = {p.title: "/" if name == "ops" else f"/{p.url_path}" for name, p in PAGES.items()}
    assert listed == served


# Every example in a docstring runs: a rule stated once in words, once in code and once as an example (issue 64:
# the doctests of rules/windows.py and rules/fleet.py never ran). Each module holding a ">>>" is found, not listed.
WITH_EXAMPLES = sorted(
    ".".join(p.relative_to(base).with_suffix("").parts)
    for base, package in ((ROOT, "streaming"), (ROOT, "dashboard"), (ROOT / "clients" / "python", "watermark_client"))
    for p in (base / package).rglob("*.py")
    if ">>> " in p.read_text(encoding="utf-8"))


def test_the_modules_with_examples_are_found() -> None:
    assert {"streaming.rules.windows", "streaming.rules.fleet", "streaming.schema.acl", "streaming.apps.monitor.http",
            "dashboard.screens.wall.model", "watermark_client.stream"} <= set(WITH_EXAMPLES)


@pytest.mark.parametrize("name", WITH_EXAMPLES)
def test_every_docstring_example_holds(name: str) -> None:
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0, result
