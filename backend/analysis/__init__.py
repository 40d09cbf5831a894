"""Agreement statistics between metrics and radiologists."""
