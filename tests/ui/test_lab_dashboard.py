"""The lab pages under Streamlit's AppTest, against lanes seeded by the real pipeline: the comparison table,
the findings and the delay trade-off equal the independent oracle, and the pipeline selector switches pages."""

from __future__ import annotations

import json
import math
import random
import uuid

import pytest
import redis
from pyspark.sql import SparkSession
from streamlit.testing.v1 import AppTest

from dashboard.status import human_ms
from dashboard.testing import page_test
from streaming.apps.job import register_lanes
from streaming.apps.replay import replay
from streaming.rules.fleet import IdleDecision
from streaming.rules.tradeoff import GRID_MS
from streaming.schema.config import Config
from streaming.schema.keys import KeySchema
from tests.oracle import T0_MS, oracle, to_iso
from tests.pipeline.test_lab import to_batches

pytestmark = pytest.mark.spark

MIN = 60_000
LANES = ("per-server-max", "per-server-min", "per-server-min-idle")

def lab_lines(seed: int = 41, batches: int = 12) -> list[dict]:
    """A and B around a moving now with some stragglers; C 30 minutes behind it in every batch: min waits for
    C, max drops it."""
    rng = random.Random(seed)
    lines = []
    for b in range(batches):
        now = T0_MS + (b + 1) * 5 * MIN
        for _ in range(rng.randint(3, 12)):
            lag = rng.choice([0, rng.randint(0, 2 * MIN), rng.randint(5 * MIN, 25 * MIN)])
            lines.append({"batch": b, "server": rng.choice("AB"), "player_id": f"p{rng.randint(1, 9)}",
                          "event_time": to_iso(now - lag)})
        lines.append({"batch": b, "server": "C", "player_id": f"c{rng.randint(1, 3)}",
                      "event_time": to_iso(now - 30 * MIN - rng.randint(0, MIN))})
    return lines


LINES = lab_lines()


def expected(policy: str | None, delay: int = 5 * MIN) -> dict:
    return oracle(LINES, 10 * MIN, 10 * MIN, delay, per_server=policy, servers="ABC")


@pytest.fixture(scope="module")
def lab(spark: SparkSession, redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Config:
    tmp = tmp_path_factory.mktemp("labdash")
    ns = f"labdash-{uuid.uuid4().hex[:6]}"
    base = Config(redis_url=redis_url, embedded_redis=False, namespace=ns, window_ms=10 * MIN, slide_ms=10 * MIN,
                  delay_ms=5 * MIN, checkpoint_dir=str(tmp / ns), spark_master="local[2]",
                  retention_ms=100 * 365 * 86_400_000, known_servers=frozenset("ABC"), lanes=LANES)
    replay(to_batches(LINES), base)  # the pipeline's sink commits every lane from the same read
    register_lanes(redis.Redis.from_url(redis_url), KeySchema(ns), base)
    return base


@pytest.fixture()
def env(lab: Config, monkeypatch: pytest.MonkeyPatch) -> Config:
    monkeypatch.setenv("REDIS_URL", lab.redis_url)
    monkeypatch.setenv("PIPELINE_NAMESPACE", lab.namespace)
    return lab


def run_page(page: str, **state: object) -> AppTest:
    at = page_test(page, timeout=90, **{"now_ms": T0_MS + 200 * MIN, "range": "60 min", **state})
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_the_seed_shows_the_policies_apart() -> None:
    dropped = {p: sum(w["dropped"] for w in expected(p)["windows"] if w["server"] == "C") for p in ("min", "max")}
    assert dropped["min"] == 0 < dropped["max"]


def test_lab_page_compares_the_lanes_exactly(env: Config) -> None:
    at = run_page("lab")
    rows = {r["Pipeline"]: r for r in at.dataframe[0].value.to_dict("records")}
    assert set(rows) == {"configured pipeline", *LANES}
    for label, policy in (("configured pipeline", None), ("per-server-min", "min"), ("per-server-max", "max")):
        doc = expected(policy)
        assert rows[label]["Dropped late"] == f'{sum(w["dropped"] for w in doc["windows"]):,}', label
        assert rows[label]["Accepted"] == f'{sum(w["events"] for w in doc["windows"]):,}', label
        per_server = {s: sum(w["dropped"] for w in doc["windows"] if w["server"] == s) for s in "ABC"}
        assert rows[label]["Dropped by server"] == ", ".join(f"{s} {n:,}" for s, n in per_server.items())
    texts = [e.value for e in (*at.warning, *at.info, *at.success)]
    assert any(t.startswith("per-server-min: **C** holds the combined watermark") for t in texts), texts
    lost = {s: sum(w["dropped"] for w in expected("max")["windows"] if w["server"] == s) for s in "ABC"}
    here = ", ".join(f"{s} {n:,}" for s, n in lost.items() if n)
    assert any(t.startswith("per-server-max: the fastest server") and f"dropped here: {here}" in t
               for t in texts), texts
    assert len(at.get("plotly_chart")) == 1 + len(LANES)  # all lanes, and one per per-server lane
    assert any("No server has been declared idle" in c.value for c in at.caption)  # the empty state, in words


def test_lab_page_lists_the_jobs_idle_decisions_and_why(env: Config) -> None:
    client, keys = redis.Redis.from_url(env.redis_url), KeySchema(env.namespace)
    decisions = [IdleDecision("B", T0_MS + 100 * MIN, T0_MS + 90 * MIN), IdleDecision("C", T0_MS + 101 * MIN,
                                                                                     T0_MS + 95 * MIN)]
    for i, d in enumerate(decisions):
        client.xadd(keys.idleness, d.record(f"{d.at_ms}-{i}"))
    try:
        at = run_page("lab", now_ms=T0_MS + 207 * MIN)  # a refresh tick no other test has cached
        table = at.dataframe[1].value.to_dict("records")
        assert [(r["Server"], r["Why"], r["Marker entry"]) for r in table] == [
            ("C", "silent for 360.0 s: its last event arrived 360.0 s before", f"{T0_MS + 101 * MIN}-1"),
            ("B", "silent for 600.0 s: its last event arrived 600.0 s before", f"{T0_MS + 100 * MIN}-0")]
    finally:
        client.delete(keys.idleness)


def oracle_recommendation(target: float, server: str | None = None) -> int | str | None:
    """The smallest delay whose replay drops at most the allowed share; "too few" when the replay at 0 s dropped
    fewer than 10 pairs, or has fewer pairs than make the allowed share 10 (nothing to stand on)."""
    counts = []
    for d in GRID_MS:
        cells = [w for w in expected(None, d)["windows"] if server is None or w["server"] == server]
        counts.append((d, sum(w["dropped"] for w in cells), sum(w["events"] + w["dropped"] for w in cells)))
    late, pairs = counts[0][1], counts[0][2]
    if late < 10 or pairs * (1 - target) < 10 - 1e-9:
        return "too few"
    return next((d for d, dropped, pairs in counts if dropped <= math.floor((1 - target) * pairs + 1e-9)), None)


@pytest.mark.parametrize("target", ["99%", "99.9%"])
def test_delay_page_recommends_what_the_oracle_does(env: Config, target: str) -> None:
    at = run_page("delay", delay_target=target)
    metrics = {m.label: m.value for m in at.metric}
    best = oracle_recommendation({"99%": 0.99, "99.9%": 0.999}[target])
    params = redis.Redis.from_url(env.redis_url).hget(KeySchema(env.namespace).state, "params")
    current = json.loads(params)["delay_ms"]  # the job's own, as it committed it
    assert metrics[f"Recommended delay for {target}"] == (f"keep {human_ms(current)}" if best == "too few" else
                                                          "0 s" if best == 0 else human_ms(best))
    table = at.dataframe[1].value.to_dict("records")
    for row, d in zip(table, GRID_MS, strict=True):
        doc = expected(None, d)
        assert (row["Dropped pairs"], row["Of"]) == (f'{sum(w["dropped"] for w in doc["windows"]):,}',
                                                     f'{sum(w["events"] + w["dropped"] for w in doc["windows"]):,}')
    per_server = {r["Server"]: r["Recommended delay"] for r in at.dataframe[0].value.to_dict("records")}
    for s in "ABC":
        rec = oracle_recommendation({"99%": 0.99, "99.9%": 0.999}[target], s)
        assert per_server[s] == ("too few late events" if rec == "too few" else "beyond the largest candidate"
                                 if rec is None else "0 s" if rec == 0 else human_ms(rec))


def test_the_pipeline_selector_switches_every_page_to_a_lane(env: Config) -> None:
    at = run_page("watermark", pipeline="per-server-max")
    dropped = {m.label: m.value for m in at.metric}["Dropped late (total)"]
    assert int(dropped.replace(",", "")) == sum(w["dropped"] for w in expected("max")["windows"])
    assert any("combined by max" in c.value for c in at.caption)
