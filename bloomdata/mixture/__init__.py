"""Blends of datasets: the weight maths (``weights``), published mixtures such as BLOOM's (``mixture``), the
blend YAML (``spec``), tuning a blend for a token budget or a mixture (``tune``) and its files (``report``)."""
