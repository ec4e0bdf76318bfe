"""A ready Grafana dashboard and Prometheus alerting rules for :mod:`boundedgate.prometheus`.

``grafana.json`` (import it in Grafana, pick the Prometheus data source) and ``alerts.yml``
(``rule_files:`` in Prometheus) sit next to this module; :data:`GRAFANA` and :data:`ALERTS` are
their paths.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ("ALERTS", "GRAFANA")

#: The Grafana dashboard (JSON model).
GRAFANA = Path(__file__).with_name("grafana.json")
#: The Prometheus alerting rules.
ALERTS = Path(__file__).with_name("alerts.yml")
