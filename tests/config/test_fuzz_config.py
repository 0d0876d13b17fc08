"""Fuzzing pipeline files: every generated or mutated TOML either loads or raises :class:`flexkit.ConfigError`.

Inputs start from the example pipelines and from generated valid pipelines, then get mutated: type flips, missing
and extra keys at every level, out-of-range and huge numbers, unicode keys and values, deep nesting, and at the
byte level garbage, truncation, invalid UTF-8, NUL bytes and raw TOML literals the writer never emits. Each input
goes the way a user's file does (``parse_toml`` + ``pipeline_from_dict``, or ``load_pipeline`` on a file):

- it loads: then the scheduler is built, a batch read (of ``batch_size`` tasks), feedback for it given, the next
  batch read, and the scheduler closed;
- or it raises ``ConfigError`` whose issues each carry a key path (syntax and encoding errors: no path, but the
  message gives the line and column, or says UTF-8).

Anything else (``TypeError``, ``KeyError``, ``RecursionError``, ``OverflowError``, ...) fails the test.

The default run tries a few hundred inputs; the big run (``FLEXKIT_SLOW=1 pytest -m slow tests/test_fuzz_*.py``)
tries ``FLEXKIT_FUZZ_EXAMPLES`` (default 10,000) and prints its tally.
"""

from __future__ import annotations

import copy
import datetime as dt
import json
import math
import os
import re
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flexkit import ConfigError
from flexkit.config._converter import describe, make_converter, structure
from flexkit.config._loader import parse_toml
from flexkit.config._models import PipelineConfig, RunConfig
from flexkit.pipeline._pipeline import load_pipeline, pipeline_from_dict
from flexkit.sample._actuator import Mix
from flexkit.scheduler._scheduler import TasksetEntry, TasksetScheduler
from flexkit.selectors import SequentialSelector
from flexkit.tasksets import InMemoryTaskset

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
SLOW = pytest.mark.skipif(os.environ.get("FLEXKIT_SLOW") != "1", reason="big fuzz run: set FLEXKIT_SLOW=1")
BIG_N = int(os.environ.get("FLEXKIT_FUZZ_EXAMPLES", "10000"))

#: Taskset files written for the fuzzed pipelines (name -> rows); the examples' paths are among them.
DATA_FILES = {"data/arithmetic.jsonl": 40, "data/word_problems.jsonl": 24, "data/tiny.jsonl": 3, "data/one.jsonl": 1}

FUZZ_SETTINGS: dict[str, Any] = {
    "deadline": None,
    "suppress_health_check": list(HealthCheck),
    "database": None,
}


# -- a minimal TOML writer ------------------------------------------------------------------------------------

_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


def toml_string(text: str) -> str:
    """A TOML basic string (control characters escaped)."""
    out = ['"']
    for ch in text:
        code = ord(ch)
        if ch in '"\\':
            out.append("\\" + ch)
        elif code < 0x20 or code == 0x7F:
            out.append(f"\\u{code:04x}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def toml_key(key: str) -> str:
    """A bare key when possible, else a quoted one."""
    return key if _BARE_KEY.match(key) else toml_string(key)


def toml_value(value: Any) -> str:
    """An inline TOML value."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        return toml_string(value)
    if isinstance(value, (dt.datetime, dt.date, dt.time)):
        return value.isoformat()
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{toml_key(k)} = {toml_value(v)}" for k, v in value.items()) + "}"
    raise TypeError(f"cannot write {type(value).__name__} as TOML")


def _is_table_array(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(v, dict) for v in value)


def toml_dumps(data: dict[str, Any]) -> str:
    """Serialise a dict as TOML: scalars and inline arrays first, then ``[tables]`` and ``[[arrays of tables]]``."""
    lines: list[str] = []

    def table(path: list[str], body: dict[str, Any], header: str | None) -> None:
        if header is not None:
            lines.append(header)
        for key, value in body.items():
            if not isinstance(value, dict) and not _is_table_array(value):
                lines.append(f"{toml_key(key)} = {toml_value(value)}")
        for key, value in body.items():
            sub = [*path, key]
            name = ".".join(toml_key(k) for k in sub)
            if isinstance(value, dict):
                table(sub, value, f"[{name}]")
            elif _is_table_array(value):
                for item in value:
                    table(sub, item, f"[[{name}]]")

    table([], data, None)
    return "\n".join(lines) + "\n"


# -- checking one input ---------------------------------------------------------------------------------------

_LOCATED = re.compile(r"line \d+, column \d+")


def check_syntax_error(exc: ConfigError) -> None:
    """A TOML syntax or encoding error: no key path, but the message locates the problem."""
    assert exc.issues, "a ConfigError without issues"
    for issue in exc.issues:
        assert issue.message, f"empty message in {exc!r}"
        assert _LOCATED.search(issue.message) or "UTF-8" in issue.message, f"syntax error without a place: {issue}"


_TOP_KEYS = {f.alias for f in attrs.fields(PipelineConfig)}
_FIRST_SEGMENT = re.compile(r'^("(?:[^"\\]|\\.)*"|[A-Za-z0-9_-]+)')


def check_config_error(exc: ConfigError, data: dict[str, Any] | None = None) -> None:
    """A structural config error: every issue has a message and a key path, which starts at a top-level key of the
    file (``data``'s, when given) or of the pipeline schema."""
    assert exc.issues, "a ConfigError without issues"
    for issue in exc.issues:
        assert issue.path, f"issue without a key path: {issue.message!r}"
        assert issue.message, f"issue without a message at {issue.path!r}"
        first = _FIRST_SEGMENT.match(issue.path)
        assert first, f"key path {issue.path!r} does not start with a key"
        key = first.group(1)
        assert key in _TOP_KEYS or key.startswith('"') or (data is not None and key in data), issue


def known_issue(pipe: Any) -> str | None:
    """Why a loaded pipeline would only be built and read once; None: no known issue is left (the m >= 2**53
    precision bug of difficulty_based is now prevented by its bound ``m <= 10**6``)."""
    return None


def check_loaded(pipe: Any) -> None:
    """A loaded pipeline builds its scheduler (else a ConfigError with paths), reads a full batch, takes feedback
    for it, reads the next one, and closes."""
    try:
        sched = pipe.scheduler
    except ConfigError as exc:
        check_config_error(exc)
        raise
    try:
        batch = sched.read()
        assert len(batch) == pipe.config.run.batch_size
        if known_issue(pipe):
            return
        rewards = [0.0, 1.0, 0.5, 0.25]
        pipe.feedback([{"reward": rewards[i % 4], "taskset_id": t.taskset_id, "index": t.index}
                       for i, t in enumerate(batch)])
        if sched.step < sched.total_steps:
            assert len(sched.read()) == pipe.config.run.batch_size
    finally:
        sched.close()


def check_input(raw: bytes, workdir: Path, *, via_file: bool = False) -> str:
    """Load ``raw`` as a pipeline; return ``"loaded"``, ``"invalid"``, ``"syntax"`` or ``"known_issue"``. Any other
    exception, or a ConfigError without key paths / locations, fails."""
    if via_file:
        path = workdir / "fuzz.toml"
        path.write_bytes(raw)
        try:
            pipe = load_pipeline(path)
        except ConfigError as exc:
            if any(not issue.path for issue in exc.issues):
                check_syntax_error(exc)
                return "syntax"
            check_config_error(exc, parse_toml(raw))
            return "invalid"
    else:
        try:
            data = parse_toml(raw)
        except ConfigError as exc:
            check_syntax_error(exc)
            return "syntax"
        try:
            pipe = pipeline_from_dict(data, base_dir=workdir)
        except ConfigError as exc:
            check_config_error(exc, data)
            return "invalid"
    try:
        check_loaded(pipe)
    except ConfigError:
        return "invalid"
    return "known_issue" if known_issue(pipe) else "loaded"


# -- seeds: the examples and generated valid pipelines --------------------------------------------------------


def write_tasksets(root: Path) -> None:
    """Small JSONL tasksets with features f0, f1 (and the examples' weak/strong pass rates) in [0, 1]."""
    for rel, rows in DATA_FILES.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        lines = []
        for i in range(rows):
            f0 = round((i * 7 % 11) / 10, 3) if rows > 1 else 0.5
            f1 = round(min(1.0, f0 + 0.25), 3)
            lines.append(json.dumps({"question": f"{i} + 1 =", "answer": str(i + 1), "f0": f0, "f1": f1,
                                     "weak_pass_rate": f0, "strong_pass_rate": f1}))
        path.write_text("\n".join(lines) + "\n")


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory holding the fuzz tasksets; relative paths in fuzzed pipelines resolve against it."""
    root = tmp_path_factory.mktemp("fuzz_config")
    write_tasksets(root)
    return root


EXAMPLE_SEEDS: list[dict[str, Any]] = [tomllib.loads(p.read_text()) for p in sorted(EXAMPLES.glob("*.toml"))]

_UNIT = st.floats(0, 1, allow_nan=False)
_POSITIVE = st.one_of(st.floats(0.01, 10), st.floats(5e-324, 1e308), st.sampled_from([5e-324, 1e-300, 1e308]))
_COUNT = st.one_of(st.integers(1, 64), st.sampled_from([2**31, 2**62, 2**63 - 1]))
_BIG_TEXT = st.one_of(st.text(min_size=1, max_size=8), st.sampled_from(["😀", "e\u0301", "\u202eabc", "x" * 300]))
_SELECTORS: dict[str, st.SearchStrategy[dict[str, Any]]] = {
    "sequential": st.just({}),
    "shuffle": st.just({}),
    "random": st.just({}),
    "offline_easy2hard": st.fixed_dictionaries(
        {"feature_keys": st.sampled_from([["f0"], ["f1", "f0"], ["weak_pass_rate"]])},
        optional={"order": st.sampled_from(["ascending", "descending"])},
    ),
    "difficulty_based": st.fixed_dictionaries(
        {},
        optional={
            "feature_keys": st.sampled_from([["f0", "f1"], ["weak_pass_rate", "strong_pass_rate"]]),
            "m": st.integers(min_value=1, max_value=10**6),
            "lamb": st.floats(0, 1, exclude_max=True),
            "rho": _UNIT,
            "adaptive_rho": st.booleans(),
            "target_reward": _UNIT,
            "tau": st.one_of(st.just(0.0), _POSITIVE),
            "do_sample": st.booleans(),
        },
    ),
}

_SCORERS = {
    "reward": st.just({}),
    "group_solve_rate": st.fixed_dictionaries({}, optional={"success_threshold": _UNIT}),
    "group_reward_std": st.just({}),
    "advantage_magnitude": st.fixed_dictionaries({}, optional={"reduce": st.sampled_from(["mean", "sum", "max"])}),
    "token_prob": st.just({}),
}
_ACTUATORS = {
    "threshold_band": ("select", st.just({"low": 0.2, "high": 0.8})),
    "topk_fraction": ("select", st.fixed_dictionaries({}, optional={"fraction": st.floats(5e-324, 1),
                                                                    "largest": st.booleans()})),
    "softmax": ("reweight", st.fixed_dictionaries({}, optional={"temperature": _POSITIVE,
                                                               "negate": st.booleans()})),
    "difficulty_band": ("reweight", st.just({"low": 0.1, "high": 0.9, "inside": 1.0, "outside": 0.5})),
    "reward_gap": ("mix", st.fixed_dictionaries({}, optional={"window": _COUNT,
                                                             "temperature": _POSITIVE,
                                                             "floor": _UNIT})),
    "static": ("mix", st.none()),  # proportions depend on the taskset names
}


@st.composite
def valid_pipelines(draw: st.DrawFn) -> dict[str, Any]:
    """A pipeline that should load (tasksets over the fuzz data files, any built-in components)."""
    run: dict[str, Any] = {"batch_size": draw(st.integers(1, 12))}
    if draw(st.booleans()):
        run["seed"] = draw(st.integers(0, 2**63 - 1))
    end = draw(st.sampled_from(["none", "epochs", "steps"]))
    if end != "none":
        run["total_epochs" if end == "epochs" else "total_steps"] = draw(_COUNT)
    if draw(st.booleans()):
        run["prefetch"] = draw(st.booleans())
    names = draw(st.lists(st.one_of(st.sampled_from(["arith", "words", "ünï", "测试"]), _BIG_TEXT), min_size=1,
                          max_size=3, unique=True).filter(lambda ns: all(n.strip() for n in ns)))
    weighted = draw(st.booleans())
    tasksets = []
    for name in names:
        ts: dict[str, Any] = {"name": name, "path": draw(st.sampled_from(["data/arithmetic.jsonl",
                                                                         "data/word_problems.jsonl"]))}
        if draw(st.booleans()):
            ts["storage_type"] = "file"
        if weighted:
            ts["weight"] = draw(_POSITIVE)
        kind = draw(st.sampled_from(sorted(_SELECTORS)))
        if kind != "sequential" or draw(st.booleans()):
            ts["selector"] = {"type": kind, **draw(_SELECTORS[kind])}
        tasksets.append(ts)
    data: dict[str, Any] = {"run": run, "tasksets": tasksets}
    if draw(st.booleans()):
        fb: dict[str, Any] = {"out_of_range": draw(st.sampled_from(["clip", "error"]))}
        if draw(st.booleans()):
            fb["type"] = "pass_rate_calculator"
        data["feedback"] = fb
    if draw(st.integers(0, 2)) == 0:
        actuator = draw(st.sampled_from(sorted(_ACTUATORS)))
        mechanism, params = _ACTUATORS[actuator]
        scorer = draw(st.sampled_from(sorted(_SCORERS)))
        act = {"type": actuator}
        act.update(draw(params) or {"proportions": {n: draw(_POSITIVE) for n in names}})
        sample: dict[str, Any] = {"mechanism": mechanism, "scorer": {"type": scorer, **draw(_SCORERS[scorer])},
                                  "actuator": act}
        if draw(st.booleans()):
            sample["estimator"] = draw(st.sampled_from(["grpo", "rloo", "gae"]))
        data["sample"] = sample
    return data


# -- mutations on parsed pipelines ----------------------------------------------------------------------------

KNOWN_KEYS = [
    "run", "tasksets", "feedback", "sample", "batch_size", "seed", "total_epochs", "total_steps", "prefetch",
    "name", "weight", "selector", "storage_type", "path", "format", "type", "feature_keys", "m", "lamb", "rho",
    "adaptive_rho", "target_reward", "tau", "do_sample", "order", "out_of_range", "mechanism", "estimator",
    "weights_key", "scorer", "actuator", "success_threshold", "reward_key", "reduce", "low", "high", "inside",
    "outside", "temperature", "negate", "fraction", "largest", "window", "floor", "proportions",
]
NEAR_MISSES = ["batchsize", "Batch_Size", "sed", "tasksets ", "selecter", "typ", "feature_key", "lambda", "τ", ""]
UNICODE_TEXT = [
    "😀", "🧪🔥", "\u202eevil\u202c", "مرحبا", "שלום", "e\u0301\u0301\u0301", "\u200b", "\ufeff", "ß", "ﬁ", "İ",
    "\u0000", "\u001f", "a\nb", "\\", '"', "'''", "[x]", "#", "𝕏" * 50, "x" * 5000, " ", "\t",
]
EXTREME_NUMBERS: list[Any] = [
    0, -1, 1, -(2**63), 2**63 - 1, 2**63, 2**64, 10**30, -(10**30), 10**400, -(10**400), 0.0, -0.0, 1e308, -1e308,
    5e-324, 1e-300, 0.5, 1.0000000000000002, math.inf, -math.inf, math.nan,
]
DATES = [dt.datetime(1979, 5, 27, 7, 32), dt.datetime(2000, 1, 1, tzinfo=dt.timezone.utc), dt.date(2024, 2, 29),
         dt.time(23, 59, 59)]

_keys = st.one_of(st.sampled_from(KNOWN_KEYS + NEAR_MISSES + UNICODE_TEXT[:11]), st.text(max_size=12))
_scalars = st.one_of(
    st.integers(-(2**70), 2**70),
    st.sampled_from(EXTREME_NUMBERS),
    st.floats(),
    st.booleans(),
    st.text(max_size=20),
    st.sampled_from(UNICODE_TEXT + KNOWN_KEYS[:4] + ["shuffle", "difficulty_based", "clip", "mix", "file"]),
    st.sampled_from(DATES),
)
any_value = st.recursive(
    _scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(_keys, inner, max_size=4)),
    max_leaves=12,
)


def type_flip(value: Any) -> st.SearchStrategy[Any]:
    """A value of another TOML type than ``value``'s (int, str, bool, float, array, table, datetime)."""
    flips: list[st.SearchStrategy[Any]] = [
        st.integers(-5, 100), st.text(max_size=8), st.booleans(), st.floats(), st.lists(_scalars, max_size=3),
        st.dictionaries(_keys, _scalars, max_size=3), st.sampled_from(DATES),
        st.just(str(value)) if isinstance(value, (int, float)) else st.just(1),
        st.just([value]), st.just({"type": value}),
    ]
    return st.one_of(flips)


def deep_value(depth: int, kind: str) -> Any:
    """An array or table (or both, alternating) nested ``depth`` deep."""
    value: Any = 1
    for level in range(depth):
        use_list = kind == "array" or (kind == "mixed" and level % 2 == 0)
        value = [value] if use_list else {"k": value}
    return value


Path_ = tuple[Any, ...]


def _nodes(data: Any, path: Path_ = ()) -> list[Path_]:
    """Every key/index path in a parsed document (the root is ``()``)."""
    out = [path]
    if isinstance(data, dict):
        for key, value in data.items():
            out += _nodes(value, (*path, key))
    elif isinstance(data, list):
        for i, value in enumerate(data):
            out += _nodes(value, (*path, i))
    return out


def _get(data: Any, path: Path_) -> Any:
    for part in path:
        data = data[part]
    return data


def _set(data: Any, path: Path_, value: Any) -> Any:
    """``data`` with the node at ``path`` replaced (the root can be replaced only by a table)."""
    if not path:
        return value if isinstance(value, dict) else data
    _get(data, path[:-1])[path[-1]] = value
    return data


MUTATIONS = ["flip", "delete", "add", "extreme", "unicode", "unicode_key", "deep", "duplicate", "plugins",
             "empty", "path", "weights", "batch_size"]


@st.composite
def mutate(draw: st.DrawFn, data: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """Apply 1-4 mutations to a copy of ``data``; returns it with the names of the mutations applied."""
    data = copy.deepcopy(data)
    applied = []
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(MUTATIONS))
        nodes = _nodes(data)
        leaves = [p for p in nodes if not isinstance(_get(data, p), (dict, list))]
        numbers = [p for p in leaves if isinstance(_get(data, p), (int, float)) and not isinstance(_get(data, p), bool)]
        aimed = {"extreme": numbers, "flip": leaves, "unicode": leaves}.get(op)
        needed = {
            "add": [p for p in nodes if isinstance(_get(data, p), (dict, list))],
            "delete": [p for p in nodes if p],
            "duplicate": [p for p in nodes if p and isinstance(p[-1], int)],
            "unicode_key": [p for p in nodes if p and isinstance(p[-1], str)],
        }.get(op)
        if needed:
            path = draw(st.sampled_from(needed))
        else:
            path = draw(st.sampled_from(aimed if aimed and draw(st.booleans()) else nodes))
        target = _get(data, path)
        if op == "flip":
            data = _set(data, path, draw(type_flip(target)))
        elif op == "delete" and path:
            parent = _get(data, path[:-1])
            del parent[path[-1]]
        elif op == "add":
            if isinstance(target, dict):
                key = draw(_keys)
                if key != "plugins":
                    target[key] = draw(any_value)
            elif isinstance(target, list):
                target.insert(draw(st.integers(0, len(target))), draw(any_value))
            else:
                op = "skip"
        elif op == "extreme":
            data = _set(data, path, draw(st.sampled_from(EXTREME_NUMBERS)))
        elif op == "unicode":
            text = draw(st.one_of(st.sampled_from(UNICODE_TEXT), st.text(min_size=1, max_size=30)))
            if isinstance(target, str) and draw(st.booleans()):
                text = target + text if draw(st.booleans()) else text + target
            data = _set(data, path, text)
        elif op == "unicode_key" and path and isinstance(path[-1], str):
            parent = _get(data, path[:-1])
            new_key = draw(st.one_of(st.sampled_from(UNICODE_TEXT[:11]), st.text(min_size=1, max_size=6),
                                     st.just(path[-1] + draw(st.sampled_from(UNICODE_TEXT[:11])))))
            if new_key != "plugins":
                parent[new_key] = parent.pop(path[-1])
        elif op == "deep":
            depth = draw(st.sampled_from([2, 5, 20, 60, 150]))
            data = _set(data, path, deep_value(depth, draw(st.sampled_from(["array", "table", "mixed"]))))
        elif op == "duplicate" and path and isinstance(path[-1], int):
            parent = _get(data, path[:-1])
            parent.append(copy.deepcopy(target))
        elif op == "plugins":  # never a real module name: nothing is imported
            data["plugins"] = draw(st.sampled_from([[], [""], [1], "x", 3, {"a": 1}, [[]], [True]]))
        elif op == "weights" and isinstance(data.get("tasksets"), list):
            for ts in data["tasksets"]:
                if isinstance(ts, dict):
                    ts["weight"] = draw(st.sampled_from([1e308, 5e-324, 1e-300, 1e300, 100.0, 0.001, 2**63 - 1, 1]))
        elif op == "batch_size" and isinstance(data.get("run"), dict):
            data["run"]["batch_size"] = draw(st.sampled_from([1, 2, 3, 16, 17, 40, 64, 65, 2**63 - 1, 2**63, 0, -1]))
        elif op == "empty":
            data = _set(data, path, draw(st.sampled_from([{}, [], ""])))
        elif op == "path":
            data = _set(data, path, draw(st.sampled_from(
                ["", ".", "data", "data/", "missing.jsonl", "data/arithmetic.json", "data/arithmetic.parquet",
                 "data/arithmetic", "data/tiny.jsonl", "data/one.jsonl", "~", "/", "data/😀.jsonl",
                 "data/\u202etxt.jsonl", "x" * 300 + ".jsonl", "data/arithmetic.jsonl\u0000.txt"])))
        else:
            op = "skip"
        applied.append(op)
    return data, applied


# -- byte-level garbage ---------------------------------------------------------------------------------------

INVALID_UTF8 = [b"\xff", b"\xfe\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\x80", b"\xe2\x82",
                b"\xc0\xaf"]
RAW_LITERALS = [
    b"9" * 5000, b"-" + b"9" * 4400, b"0x" + b"f" * 5000, b"1e99999", b"-1e-99999", b"+inf", b"-nan", b"1_000",
    b"0b101", b"0o777", b"0x_1", b"1979-05-27", b"07:32:00", b"1979-05-27T25:99:00", b"'''a\nb'''", b'"""\n"""',
    b"[1, 'a', {x = 2}]", b"{}", b"[]", b"true", b"True", b"'\\x00'", b'"\\uD800"', b'"\\U00110000"', b"00",
    b"1.", b".5", b"1e", b"0x", b"[" * 3000 + b"]" * 3000, b"{a = " * 2000 + b"1" + b"}" * 2000,
    b"[" * 200 + b"]" * 200, b"[[[[[[[[[[[[[[[[", b"{{{", b'"\x00"', b"\x00",
]


def _splice(raw: bytes, pos: int, insert: bytes, cut: int = 0) -> bytes:
    pos = min(pos, len(raw))
    return raw[:pos] + insert + raw[pos + cut :]


@st.composite
def garbage(draw: st.DrawFn, raw: bytes) -> bytes:
    """``raw`` damaged at the byte level (or replaced by random bytes / deep nesting)."""
    op = draw(st.sampled_from(["truncate", "insert", "overwrite", "nul", "utf8", "bom", "random", "literal",
                               "deep", "crlf", "dup_header"]))
    pos = draw(st.integers(0, max(len(raw), 1)))
    if op == "truncate":
        return raw[:pos]
    if op == "insert":
        return _splice(raw, pos, draw(st.binary(min_size=1, max_size=8)))
    if op == "overwrite":
        return _splice(raw, pos, draw(st.binary(min_size=1, max_size=4)), cut=draw(st.integers(1, 4)))
    if op == "nul":
        return _splice(raw, pos, b"\x00")
    if op == "utf8":
        return _splice(raw, pos, draw(st.sampled_from(INVALID_UTF8)))
    if op == "bom":
        return b"\xef\xbb\xbf" + raw
    if op == "random":
        return draw(st.binary(max_size=300))
    if op == "crlf":
        return raw.replace(b"\n", draw(st.sampled_from([b"\r\n", b"\r", b"\n\n", b"\x0b"])))
    if op == "dup_header":
        headers = re.findall(rb"^\[[^\[\n]*\]$", raw, flags=re.M)
        return raw + b"\n" + draw(st.sampled_from(headers)) + b"\n" if headers else raw + b"\n[run]\n"
    # a raw literal after a header (or at the top): values the writer never emits
    literal = draw(st.sampled_from(RAW_LITERALS))
    if op == "deep":
        depth = draw(st.sampled_from([100, 400, 1000, 20000]))
        literal = b"[" * depth + b"]" * depth if draw(st.booleans()) else b"{a=" * depth + b"1" + b"}" * depth
    key = draw(st.sampled_from([b"seed", b"batch_size", b"weight", b"tau", b"m", b"window", b"proportions",
                                b"name", b"path", b"extra"]))
    line = key + b" = " + literal + b"\n"
    starts = [0] + [m.end() for m in re.finditer(rb"^\[[^\n]*\]\n", raw, flags=re.M)]
    return _splice(raw, draw(st.sampled_from(starts)), line)


# -- the input strategies -------------------------------------------------------------------------------------

seeds = st.one_of(st.sampled_from(EXAMPLE_SEEDS), valid_pipelines())


@st.composite
def mutated_tomls(draw: st.DrawFn) -> tuple[bytes, list[str]]:
    """A seed pipeline after 1-4 structural mutations, written as TOML."""
    data, applied = draw(mutate(draw(seeds)))
    return toml_dumps(data).encode("utf-8"), applied


@st.composite
def garbage_tomls(draw: st.DrawFn) -> tuple[bytes, list[str]]:
    """A seed pipeline written as TOML, then damaged at the byte level."""
    raw = toml_dumps(draw(seeds)).encode("utf-8")
    if draw(st.booleans()):
        raw = (EXAMPLES / draw(st.sampled_from(sorted(p.name for p in EXAMPLES.glob("*.toml"))))).read_bytes()
    return draw(garbage(raw)), ["garbage"]


@st.composite
def generated_tomls(draw: st.DrawFn) -> tuple[bytes, list[str]]:
    """A generated valid pipeline, unchanged."""
    return toml_dumps(draw(valid_pipelines())).encode("utf-8"), ["valid"]


all_tomls = st.one_of(mutated_tomls(), mutated_tomls(), garbage_tomls(), generated_tomls())


# -- default-size fuzz tests ----------------------------------------------------------------------------------


def test_examples_load_as_seeds(workdir: Path) -> None:
    """Every example (paths resolved against the fuzz data) loads and reads: the seeds are valid."""
    for seed in EXAMPLE_SEEDS:
        assert check_input(toml_dumps(seed).encode(), workdir) == "loaded"


@settings(max_examples=30, **FUZZ_SETTINGS)
@given(data=st.one_of(valid_pipelines(), st.dictionaries(_keys, any_value, max_size=5)))
def test_toml_writer_round_trips(data: dict[str, Any]) -> None:
    """The test's TOML writer is faithful: parsing its output gives the data back (NaN aside)."""
    text = toml_dumps(data)
    assert json.dumps(tomllib.loads(text), default=str, sort_keys=True) == json.dumps(data, default=str, sort_keys=True)


@settings(max_examples=50, **FUZZ_SETTINGS)
@given(data=valid_pipelines(), via_file=st.booleans())
def test_fuzz_generated_pipelines_load(workdir: Path, data: dict[str, Any], via_file: bool) -> None:
    """Generated valid pipelines load, build and read (a ConfigError only for combinations the stage refuses)."""
    outcome = check_input(toml_dumps(data).encode(), workdir, via_file=via_file)
    if "sample" not in data and not any("weight" in ts for ts in data["tasksets"]):
        assert outcome in ("loaded", "known_issue"), data


@settings(max_examples=120, **FUZZ_SETTINGS)
@given(case=mutated_tomls(), via_file=st.booleans())
def test_fuzz_mutated_pipelines(workdir: Path, case: tuple[bytes, list[str]], via_file: bool) -> None:
    """Mutated pipelines load or raise a ConfigError with key paths; nothing else."""
    check_input(case[0], workdir, via_file=via_file)


@settings(max_examples=60, **FUZZ_SETTINGS)
@given(case=garbage_tomls())
def test_fuzz_garbage_bytes(workdir: Path, case: tuple[bytes, list[str]]) -> None:
    """Damaged files load or raise a ConfigError (syntax errors located by line and column, or UTF-8)."""
    check_input(case[0], workdir)


# -- the big run ----------------------------------------------------------------------------------------------


@pytest.mark.slow
@SLOW
def test_fuzz_configs_big(workdir: Path) -> None:
    """``FLEXKIT_FUZZ_EXAMPLES`` inputs (default 10,000) from all generators; prints the tally."""
    tally: Counter[str] = Counter()
    ops: Counter[str] = Counter()
    started = time.perf_counter()

    @settings(max_examples=BIG_N, **FUZZ_SETTINGS)
    @given(case=all_tomls, via_file=st.integers(0, 9))
    def run(case: tuple[bytes, list[str]], via_file: int) -> None:
        outcome = check_input(case[0], workdir, via_file=via_file == 0)
        tally[outcome] += 1
        ops.update(case[1])

    run()
    elapsed = time.perf_counter() - started
    total = sum(tally.values())
    print(f"\nconfig fuzz: {total} inputs in {elapsed:.1f} s: {dict(tally)}; mutations: {dict(ops)}")
    assert total >= BIG_N * 0.95
    assert tally["loaded"] > total * 0.05 and tally["invalid"] > total * 0.05 and tally["syntax"] > 0


# -- regressions ----------------------------------------------------------------------------------------------


def _error(call: Callable[[], Any]) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        call()
    return info.value


def _paths(exc: ConfigError) -> dict[str, str]:
    return {issue.path: issue.message for issue in exc.issues}


def test_regression_deep_nesting_is_a_located_syntax_error() -> None:
    """Arrays or inline tables nested thousands deep raised RecursionError from tomllib."""
    for text in ["a = " + "[" * 5000 + "]" * 5000, "[run]\na = " + "{b = " * 3000 + "1" + "}" * 3000]:
        exc = _error(lambda text=text: parse_toml(text))
        check_syntax_error(exc)
        assert "nested too deeply" in str(exc)


def test_regression_integer_of_too_many_digits_is_a_located_syntax_error() -> None:
    """An integer of more than 4300 digits leaked int()'s ValueError out of tomllib (not a ConfigError)."""
    exc = _error(lambda: parse_toml("[run]\nseed = " + "9" * 5000 + "\n"))
    assert type(exc) is ConfigError
    assert str(exc).startswith("line 2, column 4308: TOML syntax error: integer has too many digits")


def test_regression_syntax_error_at_the_end_of_the_file_is_located() -> None:
    """Errors tomllib reports "at end of document" had neither line nor column."""
    exc = _error(lambda: parse_toml(b"[run]\nbatch_size ="))
    assert str(exc) == "line 2, column 13: TOML syntax error: Invalid value (at the end of the file)"


def test_regression_integers_beyond_64_bits_are_config_errors(workdir: Path) -> None:
    """10**400 for a float key raised OverflowError; huge ints for int keys loaded (m = 10**30 then crashed the
    selector at its first feedback). TOML integers are 64-bit: both are now issues with key paths."""
    selector = {"type": "difficulty_based", "tau": 10**400, "m": 10**30}
    data = {"run": {"batch_size": 2, "seed": 2**64}, "tasksets": [{"name": "a", "path": "data/arithmetic.jsonl",
                                                                   "selector": selector}]}
    found = _paths(_error(lambda: pipeline_from_dict(toml_parse_round(data), base_dir=workdir)))
    assert set(found) == {"run.seed", "tasksets[0].selector.tau", "tasksets[0].selector.m"}
    assert all("64-bit" in message for message in found.values())
    assert pipeline_from_dict({**data, "run": {"batch_size": 2, "seed": 2**63 - 1},
                               "tasksets": [{"name": "a", "path": "data/arithmetic.jsonl"}]}, base_dir=workdir)


def toml_parse_round(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` written as TOML and parsed back (the path a file takes)."""
    return parse_toml(toml_dumps(data).encode())


def test_regression_unprintable_numbers_in_messages() -> None:
    """describe() of an int past Python's 4300-digit repr limit raised ValueError (Python API input)."""
    assert describe(10**5000).startswith("integer (too large")
    found = _paths(_error(lambda: structure(make_converter(), {"batch_size": 10**5000}, RunConfig)))
    assert set(found) == {"batch_size"}


def test_regression_validator_overflow_is_a_config_issue(workdir: Path) -> None:
    """A validator's arithmetic overflowing (the static mixer's fsum of proportions near the float maximum) escaped as
    OverflowError; such proportions are valid and now load."""
    data = {"run": {"batch_size": 4}, "tasksets": [{"name": "a", "path": "data/arithmetic.jsonl"},
                                                   {"name": "b", "path": "data/word_problems.jsonl"}],
            "sample": {"mechanism": "mix", "scorer": {"type": "reward"},
                       "actuator": {"type": "static", "proportions": {"a": 1e308, "b": 1e308}}}}
    assert check_input(toml_dumps(data).encode(), workdir) == "loaded"

    @attrs.frozen
    class Overflowing:
        x: float = attrs.field(validator=lambda *_: math.fsum([1e308, 1e308]))

    found = _paths(_error(lambda: structure(make_converter(), {"x": 1.0}, Overflowing)))
    assert set(found) == {"x"}


def test_regression_odd_keys_have_visible_paths(workdir: Path) -> None:
    """An unknown empty key was reported with an empty path; keys with dots or spaces were ambiguous."""
    raw = (b'"" = 0\n[run]\nbatch_size = 2\n"a.b" = 1\n"\xf0\x9f\x98\x80 x" = 2\n'
           b'[[tasksets]]\nname = "a"\npath = "p.jsonl"\n')
    found = _paths(_error(lambda: pipeline_from_dict(parse_toml(raw), base_dir=workdir)))
    assert set(found) == {'""', 'run."a.b"', 'run."😀 x"'}


def test_regression_weights_near_the_float_maximum_keep_full_batches(workdir: Path) -> None:
    """Weights of 1e308 overflowed the epoch plan's sum: every count became 0 and batches came out short."""
    data = {"run": {"batch_size": 16, "prefetch": False},
            "tasksets": [{"name": "a", "path": "data/arithmetic.jsonl", "weight": 1e308},
                         {"name": "b", "path": "data/word_problems.jsonl", "weight": 1e308}]}
    sched = pipeline_from_dict(data, base_dir=workdir).scheduler
    assert [len(batch) for batch in sched] == [16] * sched.total_steps


def test_regression_weight_overdrawing_a_small_taskset_is_refused_at_load(workdir: Path) -> None:
    """A weight giving a 3-task taskset 12 tasks of a batch loaded, then failed at some read with a ValueError
    from the selector (mid-run); now the scheduler refuses it when built."""
    data = {"run": {"batch_size": 12}, "tasksets": [{"name": "tiny", "path": "data/tiny.jsonl", "weight": 100.0},
                                                    {"name": "b", "path": "data/word_problems.jsonl", "weight": 1.0}]}
    pipe = pipeline_from_dict(data, base_dir=workdir)
    exc = _error(lambda: pipe.scheduler)
    check_config_error(exc)
    assert "taskset 'tiny' has 3 task(s)" in str(exc) and "lower its weight or batch_size" in str(exc)


def test_regression_mix_proportions_near_the_float_maximum() -> None:
    """Mix proportions (and set_mix) of 1e308 overflowed fsum / the sum: OverflowError, or a NaN plan."""
    assert Mix({0: 1e308, 1: 1e308}).proportions == {0: 0.5, 1: 0.5}
    entries = [TasksetEntry(name=n, taskset=InMemoryTaskset(n, size=8), selector=SequentialSelector(None, size=8))
               for n in "ab"]
    sched = TasksetScheduler(entries, batch_size=4, prefetch=False)
    sched.set_mix([1e308, 1e308])
    assert sched.mix == [0.5, 0.5]
    assert [len(sched.read()) for _ in range(3)] == [4, 4, 4]
