"""What runs or judges many traces: the distribution check (distribution_check, with its
binning and chi-square tests), the calibration of the acceptance rule, the measured sweep,
and the session's run log. Uses the engine; draws nothing (the figures are specviz.views)."""
