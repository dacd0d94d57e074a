"""The Grafana dashboard (plugins/plugin_utils/dashboard.py): the committed JSON, its layout, its variables, its PromQL."""

from __future__ import annotations

import itertools
import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

import dashboard as tool  # noqa: E402  (tools/dashboard.py, through conftest's sys.path)

from ansible_collections.vllm.fleet.plugins.plugin_utils import dashboard

PROMTOOL = "/usr/bin/promtool"  # Prometheus 2.42 (Debian's prometheus package) on every CI machine
GRAFANA_VARIABLES = {"__rate_interval", "__interval", "__range"}  # Grafana's own, defined by no dashboard
PROMQL_WORDS = {"and", "or", "unless", "bool", "offset", "inf", "nan"}
USE = re.compile(r"\$(?:\{(\w+)(?::\w+)?\}|(\w+))")


def panels() -> list[dict[str, Any]]:
    """Return the dashboard's panels, rows included."""
    return dashboard.dashboard()["panels"]


def graphs() -> list[dict[str, Any]]:
    """Return the panels that query, rows left out."""
    return [p for p in panels() if p["type"] != "row"]


def used_variables(text: str) -> set[str]:
    """Return the names of the $variables and ${variables} a text uses."""
    return {a or b for a, b in USE.findall(text)}


def known_metrics() -> set[str]:
    """Return every series name the kit knows an exporter for: histograms with their _bucket, _sum and _count."""
    histograms = {family + suffix for family in dashboard.VLLM_HISTOGRAMS for suffix in ("_bucket", "_sum", "_count")}
    return (histograms | dashboard.VLLM_METRICS | dashboard.COLLECTOR_METRICS | dashboard.HAPROXY_METRICS
            | dashboard.NODE_METRICS | dashboard.PROMETHEUS_METRICS)


def metric_names(expr: str) -> set[str]:
    """Return the metric names a PromQL expression selects: identifiers that are no function, label or keyword."""
    text = re.sub(r'"(?:\\.|[^"\\])*"', '""', expr)  # string literals (label values)
    text = re.sub(r"\{[^}]*\}", "", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", "", text)  # range windows
    text = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", text)  # label lists
    names = set()
    for match in re.finditer(r"(?<![\w.:])[A-Za-z_:][\w:]*", text):
        if not text[match.end():].lstrip().startswith("(") and match.group() not in PROMQL_WORDS:
            names.add(match.group())
    return names


def promtool_rules(exprs: list[str], path: Path) -> subprocess.CompletedProcess[str]:
    """Write one recording rule per expression (record: dashboard:q<N>) and run promtool check rules on the file."""
    rules = [{"record": f"dashboard:q{n}", "expr": expr} for n, expr in enumerate(exprs)]
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}, sort_keys=False))
    return subprocess.run([PROMTOOL, "check", "rules", str(path)], capture_output=True, text=True, check=False)


def test_the_committed_json_is_the_generated_one() -> None:
    """dashboards/vllm-fleet.json is dashboard() as tools/dashboard.py --write renders it: nobody edits it by hand."""
    committed = tool.DASHBOARD.read_text()
    assert json.loads(committed) == dashboard.dashboard(), "run tools/dashboard.py --write"
    assert committed == tool.rendered(), "run tools/dashboard.py --write"


def test_check_exits_1_with_one_line_on_a_stale_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """--check passes on the committed file and fails, in one line, once the file differs or is missing."""
    assert tool.main(["--check"]) == 0
    stale = tmp_path / "dashboards" / "vllm-fleet.json"
    monkeypatch.setattr(tool, "DASHBOARD", stale)
    monkeypatch.setattr(tool, "REPO", tmp_path)
    assert tool.main(["--check"]) == 1
    stale.parent.mkdir()
    stale.write_text(tool.rendered().replace('"refresh": "30s"', '"refresh": "5s"'))
    capsys.readouterr()
    assert tool.main(["--check"]) == 1
    assert capsys.readouterr().out.count("\n") == 1
    assert tool.main(["--write"]) == 0 and tool.main(["--check"]) == 0


def test_queries_prints_every_runnable_query(capsys: pytest.CaptureFixture[str]) -> None:
    """--queries prints panel_queries() as JSON: one (title, expr, needs) per query of every panel."""
    assert tool.main(["--queries"]) == 0
    printed = [tuple(q) for q in json.loads(capsys.readouterr().out)]
    assert printed == dashboard.panel_queries()
    assert len(printed) == sum(len(p.queries) for p in dashboard.PANELS) == sum(len(p["targets"]) for p in graphs())


def test_dashboard_metadata_for_grafana_import() -> None:
    """uid, title, schema version, the datasource input, the time range and refresh Grafana's Import dashboard reads."""
    model = dashboard.dashboard()
    assert (model["uid"], model["title"], model["schemaVersion"]) == ("vllm-fleet", "vLLM fleet", 39)
    assert model["__inputs"] == [{"name": "DS_PROMETHEUS", "label": "Prometheus", "description": model["__inputs"][0][
        "description"], "type": "datasource", "pluginId": "prometheus", "pluginName": "Prometheus"}]
    assert (model["time"], model["refresh"], model["id"]) == ({"from": "now-1h", "to": "now"}, "30s", None)
    assert {r["id"] for r in model["__requires"] if r["type"] == "panel"} == {p["type"] for p in graphs()}


def test_panel_ids_are_unique_and_the_grid_has_no_overlap() -> None:
    """Unique ids; each panel within the 24-column grid; no two panels share a cell; rows span the full width."""
    ids = [p["id"] for p in panels()]
    assert len(ids) == len(set(ids)) and all(isinstance(i, int) and i > 0 for i in ids)
    for p in panels():
        g = p["gridPos"]
        assert g["x"] >= 0 and g["y"] >= 0 and g["w"] > 0 and g["h"] > 0 and g["x"] + g["w"] <= 24, p["title"]
    assert all(p["gridPos"]["w"] == 24 and p["gridPos"]["x"] == 0 for p in panels() if p["type"] == "row")
    for a, b in itertools.combinations(panels(), 2):
        ga, gb = a["gridPos"], b["gridPos"]
        apart = (ga["x"] + ga["w"] <= gb["x"] or gb["x"] + gb["w"] <= ga["x"]
                 or ga["y"] + ga["h"] <= gb["y"] or gb["y"] + gb["h"] <= ga["y"])
        assert apart, f"{a['title']} overlaps {b['title']}"


def test_rows_come_in_order_each_above_its_own_panels() -> None:
    """Each row's panels lie below its row line and above the next row's."""
    rows = [p for p in panels() if p["type"] == "row"]
    assert [r["title"] for r in rows] == list(dashboard.ROWS)
    row_of = {p.title: p.row for p in dashboard.PANELS}
    starts = {r["title"]: r["gridPos"]["y"] for r in rows}
    ends = dict(zip(dashboard.ROWS, [starts[r] for r in dashboard.ROWS[1:]] + [10**6]))
    for p in graphs():
        g = p["gridPos"]
        assert starts[row_of[p["title"]]] < g["y"] and g["y"] + g["h"] <= ends[row_of[p["title"]]], p["title"]


def test_every_target_has_an_expr_a_ref_id_and_the_datasource_input() -> None:
    """Each panel queries; each target has a refId unique in its panel, an expr and ${DS_PROMETHEUS} as datasource."""
    inputs = {i["name"] for i in dashboard.dashboard()["__inputs"]}
    for p in graphs():
        assert p["targets"] and p["type"] in dashboard.KINDS, p["title"]
        assert p["datasource"] == {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}, p["title"]
        assert len({t["refId"] for t in p["targets"]}) == len(p["targets"]), p["title"]
        for t in p["targets"]:
            assert t["expr"].strip() and t["refId"] and "legendFormat" in t, p["title"]
            assert t["datasource"] == {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}, p["title"]
            assert used_variables(t["datasource"]["uid"]) <= inputs, p["title"]


def test_every_variable_used_is_defined_and_every_one_defined_is_used() -> None:
    """$host and $scene are query variables (multi, All as .*); the panels use no other but Grafana's own."""
    model = dashboard.dashboard()
    variables = {v["name"]: v for v in model["templating"]["list"]}
    assert set(variables) == {"host", "scene"}
    for v in variables.values():
        assert (v["type"], v["multi"], v["includeAll"], v["allValue"]) == ("query", True, True, ".*")
        assert v["query"] == v["definition"] and re.fullmatch(r"label_values\(.+, \w+\)", v["query"]), v["name"]
        assert v["datasource"] == {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}, v["name"]
    used: set[str] = set()
    for text in [t["expr"] for p in graphs() for t in p["targets"]] + [v["query"] for v in variables.values()]:
        used |= used_variables(text)
    assert used - GRAFANA_VARIABLES <= set(variables), f"undefined: {sorted(used - GRAFANA_VARIABLES - set(variables))}"
    assert set(variables) <= used
    for p in graphs():
        for t in p["targets"]:
            # Multi-value variables only as regex matchers: label=~"$var".
            assert not re.search(r'[^=~]="\$(host|scene)"', t["expr"]) and "!~" not in t["expr"], p["title"]
            assert re.findall(r"\[[^\]]*\]", t["expr"]) in ([], ["[$__rate_interval]"] * t["expr"].count("[")), p["title"]


def test_panels_are_well_formed() -> None:
    """Known rows, needs, units and kinds; unique titles; the GPU row needs GPUs, the drift verdict drift checks."""
    titles = [p.title for p in dashboard.PANELS]
    assert len(titles) == len(set(titles))
    for p in dashboard.PANELS:
        assert p.row in dashboard.ROWS and p.needs in dashboard.NEEDS and p.unit in dashboard.UNITS, p.title
        assert p.kind in dashboard.KINDS and p.queries and all(expr and legend for expr, legend in p.queries), p.title
        assert p.row != "GPUs" or p.needs == "gpu", p.title
        assert p.row != "Gateway" or p.needs == "gateway", p.title
        assert p.row != "Scenes" or p.needs == "scene", p.title
    assert {p.needs for p in dashboard.PANELS if "drift" in p.title.lower()} == {"drift"}
    assert {p.needs for p in dashboard.PANELS} == set(dashboard.NEEDS)


def test_runnable_queries_carry_no_variable() -> None:
    """panel_queries() holds all hosts and scenes (.*) and a 1m window where the dashboard holds its variables."""
    queries = dashboard.panel_queries()
    assert queries and all("$" not in expr for _, expr, _ in queries)
    assert all(needs in dashboard.NEEDS for _, _, needs in queries)
    scene = next(expr for title, expr, _ in queries if title == "Output tokens/s")
    assert 'host=~".*", scene=~".*"' in scene and "[1m]" in scene
    with pytest.raises(KeyError):
        dashboard.runnable("up{host=~\"$hots\"}")


def test_every_runnable_query_parses_with_promtool(tmp_path: Path) -> None:
    """promtool 2.42 has no command to parse an expression: one recording rule per query and `check rules` parse them."""
    exprs = [expr for _, expr, _ in dashboard.panel_queries()]
    result = promtool_rules(exprs, tmp_path / "dashboard.rules.yml")
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(exprs)} rules found" in result.stdout


def test_promtool_rejects_a_query_that_does_not_parse(tmp_path: Path) -> None:
    """The rules-file check fails on a broken query (an unclosed bracket), so the test above can fail."""
    result = promtool_rules(["sum by (host) (rate(up[1m])"], tmp_path / "broken.rules.yml")
    assert result.returncode != 0 and "dashboard:q0" not in result.stdout


def test_every_metric_a_query_uses_is_one_the_kit_knows() -> None:
    """Each name a query selects comes from vLLM, the kit's collectors, HAProxy 2.6, node_exporter or Prometheus."""
    known = known_metrics()
    used: set[str] = set()
    for title, expr, _ in dashboard.panel_queries():
        names = metric_names(expr)
        assert names, f"{title}: no metric in {expr}"
        assert names <= known, f"{title}: unknown metric {sorted(names - known)}"
        used |= names
    assert dashboard.COLLECTOR_METRICS <= used, f"not on the dashboard: {sorted(dashboard.COLLECTOR_METRICS - used)}"


@pytest.mark.parametrize(("expr", "names"), [
    ('sum by (host, scene) (rate(vllm:generation_token_total{job="vllm", scene=~".*"}[1m]))',
     {"vllm:generation_token_total"}),
    ('histogram_quantile(0.99, sum by (le) (rate(vllm:time_to_first_token_seconds_bucket{le!="+Inf"}[5m])))',
     {"vllm:time_to_first_token_seconds_bucket"}),
    ('time() - max by (host) (vllm_fleet_in_sync_record_timestamp_seconds{job="node"}) > bool 1e3',
     {"vllm_fleet_in_sync_record_timestamp_seconds"}),
    ("a / on (host) group_left (gpu) b", {"a", "b"}),
])
def test_metric_names_finds_the_selected_names(expr: str, names: set[str]) -> None:
    """The extractor keeps metric names and drops functions, labels, values, windows and numbers (a typo shows)."""
    assert metric_names(expr) == names
    assert "vllm:generation_token_total" not in known_metrics()
