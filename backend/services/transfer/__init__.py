"""Import and export of studies: cases and ReXVal files in (imports), ReXVal/JSONL out
(exports), and RadPref both ways (radpref)."""
