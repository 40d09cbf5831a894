"""Study quality control: rater monitoring (qc), calibration items and hidden repeats
(calibration), the qualification gate (qualification) and adjudication."""
