"""Blends of datasets: the weight maths (``weights``), the blend YAML (``spec``), tuning a blend for a token
budget (``tune``) and its files (``report``)."""
