"""How metrics agree with radiologists: the one study loader (study_data), correlation and
agreement (correlation), the disagreement explorer (explore), the paper's report (reports),
the benchmark, the RadCliQ refit, rating-order simulation and ER2Score training."""
