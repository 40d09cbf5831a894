"""A study's lifecycle as the lead runs it: listing, settings, status policy, giving pairs to
raters (assignment), building a study from metric-oracle candidates, and progress."""
