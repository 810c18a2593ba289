#!/usr/bin/env python3
"""Builds scripts/grafana/rocketmq-actor.json, the Grafana dashboard of the metrics in
src/metrics.rs, with Grafana's own typed SDK (grafana-foundation-sdk, from PyPI), so the
dashboard has the shape Grafana's schema gives it.

    python3 scripts/grafana_dashboard.py          # writes the dashboard
    python3 scripts/grafana_dashboard.py --check  # CI: the committed file is what this builds,
                                                  # and its queries name only metrics the code
                                                  # reports, every one of them
"""

import json
import re
import sys
from pathlib import Path

from grafana_foundation_sdk.builders import common as common_b
from grafana_foundation_sdk.builders import dashboard as dash_b
from grafana_foundation_sdk.builders import prometheus as prom_b
from grafana_foundation_sdk.builders import stat as stat_b
from grafana_foundation_sdk.builders import timeseries as ts_b
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import dashboard as dash_m
from grafana_foundation_sdk.models.dashboard import Dashboard as DashboardModel

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "scripts" / "grafana" / "rocketmq-actor.json"
METRICS_RS = ROOT / "src" / "metrics.rs"

DATASOURCE = dash_m.DataSourceRef(type_val="prometheus", uid="${datasource}")
RATE = "[$__rate_interval]"
GROUP = 'group=~"$group"'


def query(expr: str, legend: str) -> prom_b.Dataquery:
    return prom_b.Dataquery().expr(expr).legend_format(legend).range()


def series(title: str, unit: str, description: str, *targets: prom_b.Dataquery) -> ts_b.Panel:
    panel = (
        ts_b.Panel()
        .title(title)
        .description(description)
        .datasource(DATASOURCE)
        .unit(unit)
        .min(0)
        .height(8)
        .span(12)
    )
    for target in targets:
        panel = panel.with_target(target)
    return panel


def quantiles(metric: str, by: str, selector: str) -> list:
    return [
        query(
            f"histogram_quantile({q}, sum by ({by}, le) (rate({metric}_bucket{{{selector}}}{RATE})))",
            f"p{int(q * 100)} {{{{{by}}}}}",
        )
        for q in (0.5, 0.99)
    ]


def build() -> DashboardModel:
    total = (
        stat_b.Panel()
        .title("Lag now")
        .description("Messages stored and not yet consumed by the selected groups.")
        .datasource(DATASOURCE)
        .unit("short")
        .height(4)
        .span(6)
        .with_target(query(f"sum(rocketmq_consumer_lag_messages{{{GROUP}}})", "lag"))
    )
    owned = (
        stat_b.Panel()
        .title("Queues owned")
        .description("Queues the selected groups' consumers own now.")
        .datasource(DATASOURCE)
        .unit("short")
        .height(4)
        .span(6)
        .with_target(query(f"sum(rocketmq_consumer_owned_queues{{{GROUP}}})", "queues"))
    )
    builder = (
        dash_b.Dashboard("rocketmq-actor")
        .uid("rocketmq-actor")
        .description("Consumers, producers and connections of rocketmq-actor (src/metrics.rs).")
        .tags(["rocketmq", "rocketmq-actor"])
        .refresh("30s")
        .time("now-1h", "now")
        .timezone("browser")
        .with_variable(dash_b.DatasourceVariable("datasource").label("Data source").type("prometheus"))
        .with_variable(
            dash_b.QueryVariable("group")
            .label("Consumer group")
            .datasource(DATASOURCE)
            .query("label_values(rocketmq_consumer_pulls_total, group)")
            .multi(True)
            .include_all(True)
        )
        .with_row(dash_b.Row("Consumers"))
        .with_panel(total)
        .with_panel(owned)
        .with_panel(
            series(
                "Consumed",
                "ops",
                "Messages through the listeners per second, by outcome.",
                query(
                    f"sum by (group, status) (rate(rocketmq_consumer_consumed_messages_total{{{GROUP}}}{RATE}))",
                    "{{group}} {{status}}",
                ),
            )
        )
        .with_panel(
            series(
                "Lag by topic",
                "short",
                "Broker max offset minus committed offset, summed over the queues of each topic.",
                query(f"sum by (group, topic) (rocketmq_consumer_lag_messages{{{GROUP}}})", "{{group}} {{topic}}"),
            )
        )
        .with_panel(
            series(
                "Pulled",
                "ops",
                "Pull requests answered and messages they brought, per second.",
                query(f"sum by (group) (rate(rocketmq_consumer_pulls_total{{{GROUP}}}{RATE}))", "{{group}} pulls"),
                query(
                    f"sum by (group) (rate(rocketmq_consumer_pulled_messages_total{{{GROUP}}}{RATE}))",
                    "{{group}} messages",
                ),
            )
        )
        .with_panel(
            series(
                "Listener call time",
                "s",
                "Median and 99th percentile of the listener calls.",
                *quantiles("rocketmq_consumer_consume_rt_seconds", "group", GROUP),
            )
        )
        .with_panel(
            series(
                "Pull round trip",
                "s",
                "Median and 99th percentile of the pulls, long polls included.",
                *quantiles("rocketmq_consumer_pull_rt_seconds", "group", GROUP),
            )
        )
        .with_panel(
            series(
                "Cache",
                "short",
                "Messages pulled and not yet consumed (flow control bounds them), and their bytes.",
                query(f"sum by (group) (rocketmq_consumer_cached_messages{{{GROUP}}})", "{{group}} messages"),
                query(f"sum by (group) (rocketmq_consumer_cached_bytes{{{GROUP}}})", "{{group}} bytes"),
            )
        )
        .with_panel(
            series(
                "Retries and dead letters",
                "ops",
                "Failed messages handed back for a retry, and messages sent to the dead-letter queue.",
                query(
                    f"sum by (group) (rate(rocketmq_consumer_sent_back_messages_total{{{GROUP}}}{RATE}))",
                    "{{group}} retried",
                ),
                query(
                    f"sum by (group) (rate(rocketmq_consumer_dead_lettered_messages_total{{{GROUP}}}{RATE}))",
                    "{{group}} dead-lettered",
                ),
            )
        )
        .with_panel(
            series(
                "Rebalances and restarts",
                "short",
                "Rebalance rounds and queue actors restarted by their supervisor.",
                query(
                    f"sum by (group) (increase(rocketmq_consumer_rebalances_total{{{GROUP}}}{RATE}))",
                    "{{group}} rebalances",
                ),
                query(
                    f"sum by (group) (increase(rocketmq_consumer_queue_restarts_total{{{GROUP}}}{RATE}))",
                    "{{group}} queue restarts",
                ),
            )
        )
        .with_row(dash_b.Row("Producers"))
        .with_panel(
            series(
                "Sent",
                "ops",
                "Messages of the send attempts per second, by broker and outcome.",
                query(
                    f"sum by (broker, status) (rate(rocketmq_producer_sent_messages_total{RATE}))",
                    "{{broker}} {{status}}",
                ),
            )
        )
        .with_panel(
            series(
                "Send time",
                "s",
                "Median and 99th percentile of the send attempts, by broker.",
                *quantiles("rocketmq_producer_send_rt_seconds", "broker", ""),
            )
        )
        .with_row(dash_b.Row("Connections"))
        .with_panel(
            series(
                "Connections lost and re-established",
                "short",
                "Per name server or broker address.",
                query(f"sum by (peer) (increase(rocketmq_client_disconnects_total{RATE}))", "{{peer}} lost"),
                query(f"sum by (peer) (increase(rocketmq_client_reconnects_total{RATE}))", "{{peer}} back"),
            )
        )
    )
    model = builder.build()
    # Stable ids, so links to a panel (`viewPanel=…`) survive a regeneration.
    for number, panel in enumerate(model.panels, start=1):
        panel.id_val = number
    return model


def render() -> str:
    return json.dumps(build(), cls=JSONEncoder, indent=2, sort_keys=True) + "\n"


def metric_names() -> set:
    text = METRICS_RS.read_text()
    names = set(re.findall(r'pub const [A-Z_]+: &str = "(rocketmq_[a-z_]+)";', text))
    if not names:
        sys.exit("no metric names found in src/metrics.rs")
    return names


def check(text: str) -> None:
    dashboard = json.loads(text)
    # Grafana's typed model reads it back.
    DashboardModel.from_json(dashboard)
    known = metric_names()
    used = set()
    ids = []
    for panel in dashboard["panels"]:
        ids.append(panel.get("id"))
        for target in panel.get("targets", []):
            for name in re.findall(r"rocketmq_[a-z_]+", target["expr"]):
                base = re.sub(r"_(bucket|count|sum)$", "", name)
                if base not in known:
                    sys.exit(f"panel {panel['title']!r} queries {name}, which src/metrics.rs does not report")
                used.add(base)
    if known - used:
        sys.exit(f"metrics without a panel: {sorted(known - used)}")
    print(f"{len(dashboard['panels'])} panels over all {len(known)} metrics of src/metrics.rs")


def main() -> None:
    text = render()
    if "--check" in sys.argv:
        committed = OUT.read_text()
        if committed != text:
            sys.exit(f"{OUT.relative_to(ROOT)} is not what scripts/grafana_dashboard.py builds: run it")
        check(committed)
        return
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(text)
    check(text)
    print(f"wrote {OUT.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
