"""Import and export of pairs, images and ReXVal-style datasets."""
