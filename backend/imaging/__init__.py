"""DICOM/PNG/JPEG loading, windowing and de-identification."""
