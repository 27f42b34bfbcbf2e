"""The alerts' configuration (defaults, precise errors), the webhook's message and the shipped Prometheus rules
(no Redis, no Spark; promtool is Debian's)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from streaming.alerting.conditions import RULES
from streaming.alerting.config import AlertConfig, to_toml
from streaming.alerting.lifecycle import Notice, fingerprint
from streaming.alerting.promrules import prometheus_rules
from streaming.alerting.webhook import ZERO_TIME, backoff_ms, payload, rfc3339
from streaming.schema.config import ConfigError

ROOT = Path(__file__).resolve().parents[2]


def test_the_shipped_file_is_the_defaults() -> None:
    assert AlertConfig.from_toml((ROOT / "ops" / "alerts.toml").read_text()) == AlertConfig()
    assert AlertConfig.from_toml(to_toml(AlertConfig())) == AlertConfig()


def test_a_file_names_only_what_it_changes() -> None:
    cfg = AlertConfig.from_toml('[server_silent]\nafter = "5s"\nclear = "1s"\n')
    assert cfg.server_silent.after_ms == 5_000 and cfg.server_silent.timing.clear_ms == 1_000
    assert cfg.server_silent.timing.for_ms == 0 and cfg.players_drop == AlertConfig().players_drop


@pytest.mark.parametrize(("text", "error"), [
    ("[player_drop]\npercent = 10", "t.toml: unknown section [player_drop]; the sections are: players_drop,"),
    ("[players_drop]\npercnt = 10", "t.toml [players_drop]: unknown key 'percnt'; the keys are: percent, within,"),
    ("[players_drop]\npercent = 100", "t.toml [players_drop] percent must be above 0 and below 100, got 100"),
    ("[players_drop]\npercent = \"50\"", "t.toml [players_drop] percent must be a number, got '50'"),
    ("[players_drop]\nmin_players = 2.5", "t.toml [players_drop] min_players must be a whole number, got 2.5"),
    ("[players_drop]\nwithin = 300", "t.toml [players_drop] within must be a duration such as \"30s\" or \"5m\""),
    ("[server_silent]\nafter = \"soon\"", "t.toml [server_silent] after: invalid duration 'soon'"),
    ("[server_silent]\nafter = \"0s\"", "t.toml [server_silent] after must be longer than 0s, got 0s"),
    ("[late_drops]\nper_minute = -1", "t.toml [late_drops] per_minute must not be negative, got -1"),
    ("[late_drops]\nper_minute = true", "t.toml [late_drops] per_minute must be a number, got True"),
    ("[webhook]\nurl = \"ftp://x\"", "t.toml [webhook] url must start with http:// or https://, got 'ftp://x'"),
    ("[webhook]\nurl = 5", "t.toml [webhook] url must be a string, got 5"),
    ("[webhook]\nurl = \"http://h:abc/x\"", "t.toml [webhook] url 'http://h:abc/…' has no host, or a port that is"),
    ("[players_drop]\nwithin = \"2h\"", "t.toml [players_drop] within must be longer than 0s and at most 1h"),
    ("server_silent = 5", "t.toml [server_silent] must be a table of keys, got 5"),
    ("[server_silent", "t.toml: not TOML:"),
])
def test_bad_values_fail_at_start_naming_file_section_and_key(text: str, error: str) -> None:
    with pytest.raises(ConfigError) as exc:
        AlertConfig.from_toml(text, "t.toml")
    assert str(exc.value).startswith(error)


def test_the_webhook_url_from_the_environment_is_checked_too() -> None:
    assert AlertConfig().with_webhook_url("http://h/x", "E").webhook.url == "http://h/x"
    with pytest.raises(ConfigError, match="^E url must start with http:// or https://, got 'h:/…'$"):
        AlertConfig().with_webhook_url("h:9", "E")




def test_the_webhook_message_is_alertmanagers() -> None:
    fire = Notice(status="firing", rule="players_drop", subject="B", starts_at_ms=1_800_000_000_123,
                  at_ms=1_800_000_000_123, value=80.0, summary="B: 70 players online, down 80 %")
    body = payload(fire, "wm", "http://127.0.0.1:8501")
    assert body["version"] == "4" and body["status"] == "firing" and body["groupLabels"] == {"alertname": "PlayersDrop"}
    (alert,) = body["alerts"]  # type: ignore[misc]
    assert alert["labels"] == {"alertname": "PlayersDrop", "severity": "critical", "namespace": "wm", "server": "B"}
    assert alert["startsAt"] == "2027-01-15T08:00:00.123Z" and alert["endsAt"] == ZERO_TIME
    assert alert["fingerprint"] == fingerprint("players_drop", "B", "wm") != fingerprint("players_drop", "B", "other")
    assert alert["annotations"]["notice_id"] == f"wm:{fire.id}"
    assert alert["generatorURL"] == "http://127.0.0.1:8501/alerts"
    json.dumps(body)  # serialisable as it is
    resolved = payload(Notice(status="resolved", rule="players_drop", subject="B", starts_at_ms=fire.starts_at_ms,
                              ends_at_ms=1_800_000_060_000, at_ms=1_800_000_060_000), "wm", "")
    assert resolved["alerts"][0]["startsAt"] == alert["startsAt"]  # type: ignore[index]
    assert resolved["alerts"][0]["endsAt"] == rfc3339(1_800_000_060_000)  # type: ignore[index]


@pytest.mark.parametrize(("attempt", "ms"), [(1, 500), (2, 1_000), (3, 2_000), (8, 60_000), (200, 60_000)])
def test_backoff_doubles_up_to_its_cap(attempt: int, ms: int) -> None:
    assert backoff_ms(attempt, 60_000) == ms


def test_the_shipped_prometheus_rules_are_the_defaults() -> None:
    assert (ROOT / "ops" / "prometheus" / "rules.yml").read_text() == prometheus_rules(AlertConfig())


def test_promtool_loads_the_shipped_rules() -> None:
    assert shutil.which("promtool"), "promtool is missing: `apt-get install prometheus` (.ci/run does)"
    out = subprocess.run(["promtool", "check", "rules", str(ROOT / "ops" / "prometheus" / "rules.yml")],
                         capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"SUCCESS: {len(RULES)} rules found" in out.stdout


def _metric_names(text: str) -> set[str]:
    """Metric names in PromQL text; a histogram's series by its family's name."""
    import re

    return {re.sub(r"_(bucket|count|sum)$", "", m) for m in re.findall(r"\bwm_[a-z_]+\b", text)}


def test_the_rules_and_the_grafana_dashboard_use_only_metrics_the_monitor_serves() -> None:
    from streaming.apps.monitor.metrics import METRICS

    served = set(METRICS)
    grafana = json.loads((ROOT / "ops" / "grafana" / "watermark.json").read_text())
    exprs = " ".join(t["expr"] for p in grafana["panels"] for t in p["targets"])
    assert _metric_names(exprs) <= served, _metric_names(exprs) - served
    rules = prometheus_rules(AlertConfig())
    assert _metric_names(rules) <= served, _metric_names(rules) - served


def test_every_metric_is_documented() -> None:
    from streaming.apps.monitor.metrics import METRICS

    doc = (ROOT / "docs" / "alerts.md").read_text()
    assert [m for m in METRICS if f"`{m}`" not in doc] == []


def test_a_whole_number_where_a_fraction_may_be_is_read_as_the_same_number() -> None:
    """``percent = 95`` in ops/alerts.toml gives the rules the defaults' 95.0 give: one file of PromQL, not two."""
    got = AlertConfig.from_toml("[redis_full]\npercent = 95\n").redis_full.percent
    assert isinstance(got, float) and got == 95.0
    assert prometheus_rules(AlertConfig.from_toml("[redis_full]\npercent = 95\n")) == prometheus_rules(AlertConfig())


def test_the_published_thresholds_leave_the_receivers_urls_out_and_read_back_equal() -> None:
    cfg = AlertConfig().with_webhook_url("https://user:secret@hooks.example/x", "test")
    published = to_toml(cfg.without_urls())
    assert "secret" not in published and "hooks.example" not in published
    assert AlertConfig.from_toml(published) == AlertConfig()


@pytest.mark.parametrize(("online_behind", "fires"), [("0x47", True), ("0x23 30x24", False)])
def test_prometheus_holds_a_players_drop_while_the_online_view_lags_as_the_monitor_does(
        tmp_path: Path, online_behind: str, fires: bool) -> None:
    """Players time out before their events are read when the online view lags: the monitor holds the alert
    then (conditions.note_delays), and so must the shipped PromQL. A's players fall from 100 to 30 at 2 min."""
    assert shutil.which("promtool"), "promtool is missing: `apt-get install prometheus` (.ci/run does)"
    at = '{server="A",instance="m",job="wm"}'
    main = '{pipeline="main",instance="m",job="wm"}'
    series = {f"wm_players_online{at}": "100x23 30x24", f"wm_server_last_event_timestamp_seconds{at}": "0+5x47",
              f"wm_server_max_event_time_seconds{at}": "0+5x47", f"wm_server_ingest_lag_p95_seconds{at}": "0x47",
              f"wm_server_clock_ahead_seconds{at}": "0x47", f"wm_behind_seconds{main}": "0x47",
              f"wm_trigger_interval_seconds{main}": "1x47", 'wm_online_behind_seconds{instance="m",job="wm"}':
              online_behind}
    alert = {"exp_labels": {"severity": "critical", "server": "A", "instance": "m", "job": "wm"},
             "exp_annotations": {"summary": "Players online on A fell by more than the threshold"}}
    expected = [alert] if fires else []
    spec = {"rule_files": [str(ROOT / "ops" / "prometheus" / "rules.yml")], "evaluation_interval": "5s",
            "tests": [{"interval": "5s", "input_series": [{"series": k, "values": v} for k, v in series.items()],
                       "alert_rule_test": [{"eval_time": "3m", "alertname": "PlayersDrop",
                                            "exp_alerts": expected}]}]}
    (tmp_path / "test.yml").write_text(json.dumps(spec))  # JSON is YAML
    out = subprocess.run(["promtool", "test", "rules", str(tmp_path / "test.yml")], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
