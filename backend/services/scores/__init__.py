"""Metric values of a study: scoring jobs and the catalogue (scoring), "Score now"
(score_now), values computed elsewhere (score_imports) and perturbation probes (probes)."""
