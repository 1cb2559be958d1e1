"""The monitoring files in `configs/` use only what the broker exports: every PromQL expression of the Grafana
dashboard and of the alert rules names only series of `actors.metrics.names`, the scrape config's relabelling turns
Ray's `ray_<name>` into exactly those names, and Prometheus' own checker accepts the config and the rules.
(`tests/actors/test_zz_monitoring.py` runs every dashboard query against a real Prometheus scraping a broker.)"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from actors.metrics.names import EXPORTED, RAY_PREFIX, exported_series
from tests.conftest import skip_or_fail

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
DASHBOARD = CONFIGS / "grafana-raybroker.json"
SCRAPE_CONFIG = CONFIGS / "prometheus.yml"
ALERTS = CONFIGS / "prometheus-alerts.yml"

# PromQL's keywords and label-list clauses: words in an expression that name no series.
PROMQL_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless"}
STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
LABEL_LIST = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
IDENTIFIER = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
NUMBER = re.compile(r"\b\d+(?:\.\d*)?(?:[eE][+-]?\d+)?\b")


def metric_names(expr: str) -> set[str]:
    """The series an expression selects: identifiers outside strings, label matchers, ranges and label lists that
    are neither functions (followed by `(`) nor keywords."""
    text = STRING.sub('""', expr)
    text = re.sub(r"\{[^}]*\}", " ", text)
    text = re.sub(r"\[[^\]]*\]", " ", text)
    text = LABEL_LIST.sub(" ", text)
    text = NUMBER.sub(" ", text)
    names = set()
    for match in IDENTIFIER.finditer(text):
        if text[match.end() :].lstrip().startswith("(") or match.group(0) in PROMQL_KEYWORDS:
            continue
        names.add(match.group(0))
    return names


def test_the_name_extraction_finds_series_and_nothing_else() -> None:
    expr = (
        'histogram_quantile(0.99, sum by (le, request) (rate(a_bucket{request!="Fetch", x=~"b{1}"}[$__rate_interval])))'
        " / on (request) group_left sum without (WorkerId) (c_total) > bool 1e3 or absent(d)"
    )
    assert metric_names(expr) == {"a_bucket", "c_total", "d"}


def dashboard_expressions() -> list[str]:
    """Every `expr` in the dashboard: panel targets, nested rows, template variables."""
    return list(_expressions(json.loads(DASHBOARD.read_text(encoding="utf-8"))))


def _expressions(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("expr", "query") and isinstance(value, str):
                yield value
            else:
                yield from _expressions(value)
    elif isinstance(node, list):
        for item in node:
            yield from _expressions(item)


def alert_expressions() -> list[str]:
    rules = yaml.safe_load(ALERTS.read_text(encoding="utf-8"))
    return [rule["expr"] for group in rules["groups"] for rule in group["rules"]]


def test_the_dashboard_queries_only_exported_series() -> None:
    expressions = dashboard_expressions()
    assert len(expressions) >= 20
    used = set()
    for expr in expressions:
        names = metric_names(expr)
        assert names, expr
        assert names <= exported_series(), (expr, names - exported_series())
        used |= names
    # The list: traffic, requests and their latency, replication health, lag, log size, cleaner, listeners.
    for spec in EXPORTED:
        if spec.name not in {"kafka_log_log_logendoffset", "kafka_log_log_logstartoffset"}:
            assert any(series in used for series in spec.series), f"no panel shows {spec.name}"


def test_the_alert_rules_use_only_exported_series() -> None:
    for expr in alert_expressions():
        names = metric_names(expr)
        assert names and names <= exported_series(), (expr, names - exported_series())


def test_the_scrape_configs_relabelling_gives_back_exactly_the_exported_names() -> None:
    """Prometheus anchors a relabel regex (`^(?:regex)$`) and expands `$1` in the replacement."""
    config = yaml.safe_load(SCRAPE_CONFIG.read_text(encoding="utf-8"))
    (job,) = config["scrape_configs"]
    (rule,) = job["metric_relabel_configs"]
    assert (rule["source_labels"], rule["target_label"]) == (["__name__"], "__name__")
    pattern = re.compile(f"^(?:{rule['regex']})$")
    replacement = rule["replacement"].replace("$1", r"\1")
    for series in exported_series():
        assert pattern.sub(replacement, RAY_PREFIX + series) == series
    for ray_own in ("ray_tasks", "ray_node_cpu_utilization", "ray_grpc_server_req_finished_total"):
        assert not pattern.match(ray_own), ray_own  # Ray's own metrics keep their names
    assert config["rule_files"] == [ALERTS.name]


def test_prometheus_accepts_the_config_and_the_rules() -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        skip_or_fail("promtool (Debian's prometheus package) is not installed")
    for command in (["check", "config", str(SCRAPE_CONFIG)], ["check", "rules", str(ALERTS)]):
        result = subprocess.run([promtool, *command], capture_output=True, text=True, timeout=60, check=False)
        assert result.returncode == 0, result.stdout + result.stderr
