"""The rater's side: the count grid (rating) and the other annotation modes (error_records,
pairwise), the writes they share (assignment_writes), flags, time on task (activity, pace),
the category definitions and the images a rater sees."""
