"""Benchmark: import a 512 x 512 x 400 CT series into a volume store, then serve planes from it.

Builds a synthetic int16 CT series (one DICOM file a slice, Rescale Intercept -1024, a
phantom with air, soft tissue and bone) in a temporary folder, then:

* imports it with ``open_volume`` + ``VolumeStore.write`` in a **fresh child process**, which
  resets its peak RSS (``/proc/self/clear_refs``) after its imports and reports VmHWM minus
  VmRSS before the import (the import's own peak; ``resource.getrusage``'s ``ru_maxrss`` delta
  is printed too, a lower bound since it keeps the parent's mark inherited at fork); a
  second child runs the same import under ``tracemalloc`` for the Python-level peak (NumPy
  arrays included);
* opens the store and times ``axial``, ``coronal`` and ``sagittal`` planes at random indices
  (page cache warm, as right after an import), and decoding one slice from its DICOM file for
  comparison (what serving without a store costs).

``--nifti`` also writes the same volume as ``.nii.gz`` and imports that (chunked reading).

Prints one JSON object. Usage: python bench/bench_volume.py [--slices 400] [--side 512]
[--repeats 30] [--nifti]
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def phantom_slice(k: int, slices: int, side: int) -> np.ndarray:
    """Stored values (HU + 1024) of slice ``k``: air, a body ellipse, lungs, a spine."""
    yy, xx = np.mgrid[0:side, 0:side].astype(np.float32) / side - 0.5
    hu = np.full((side, side), -1000.0, np.float32)
    scale = 0.9 + 0.1 * np.sin(np.pi * k / slices)
    hu[(xx / (0.42 * scale)) ** 2 + (yy / (0.32 * scale)) ** 2 <= 1] = 40.0
    for cx in (-0.18, 0.18):
        hu[((xx - cx) / 0.13) ** 2 + (yy / 0.2) ** 2 <= 1] = -850.0
    hu[(xx / 0.05) ** 2 + ((yy - 0.22) / 0.05) ** 2 <= 1] = 700.0
    noise = np.random.default_rng(k).normal(0, 12, hu.shape).astype(np.float32)
    return np.clip(np.rint(hu + noise + 1024), 0, 4095).astype(np.int16)


def write_series(folder: Path, slices: int, side: int) -> None:
    """One DICOM file a slice, names shuffled against positions."""
    from pydicom.dataset import Dataset, FileMetaDataset
    from pydicom.uid import ExplicitVRLittleEndian, generate_uid

    folder.mkdir(parents=True, exist_ok=True)
    study, series, frame = generate_uid(), generate_uid(), generate_uid()
    names = np.random.default_rng(0).permutation(slices)
    for k in range(slices):
        ds = Dataset()
        ds.file_meta = FileMetaDataset()
        ds.file_meta.TransferSyntaxUID = ExplicitVRLittleEndian
        ds.SOPClassUID = "1.2.840.10008.5.1.4.1.1.2"
        ds.SOPInstanceUID = generate_uid()
        ds.StudyInstanceUID, ds.SeriesInstanceUID, ds.FrameOfReferenceUID = study, series, frame
        ds.Modality = "CT"
        ds.ImagePositionPatient = ["-200", "-200", f"{-300 + 1.25 * k:.2f}"]
        ds.ImageOrientationPatient = ["1", "0", "0", "0", "1", "0"]
        ds.PixelSpacing = ["0.78125", "0.78125"]
        ds.SliceThickness = "1.25"
        ds.RescaleSlope, ds.RescaleIntercept = "1", "-1024"
        ds.SamplesPerPixel = 1
        ds.PhotometricInterpretation = "MONOCHROME2"
        ds.Rows = ds.Columns = side
        ds.BitsAllocated, ds.BitsStored, ds.HighBit, ds.PixelRepresentation = 16, 16, 15, 1
        ds.PixelData = phantom_slice(k, slices, side).astype("<i2").tobytes()
        ds.save_as(folder / f"IM{names[k]:05d}.dcm", enforce_file_format=True)


def write_nifti(path: Path, slices: int, side: int) -> None:
    """The same phantom as int16 NIfTI with scl_inter -1024, written slice by slice."""
    import gzip

    import nibabel as nib

    hdr = nib.Nifti1Header()
    hdr.set_data_dtype(np.int16)
    hdr.set_data_shape((side, side, slices))
    hdr.set_zooms((0.78125, 0.78125, 1.25))
    hdr.set_sform(np.diag([0.78125, 0.78125, 1.25, 1.0]), code=1)
    hdr["scl_slope"], hdr["scl_inter"] = 1.0, -1024.0
    hdr["vox_offset"] = 0
    with gzip.open(path, "wb", compresslevel=1) as fh:
        hdr.write_to(fh)
        for k in range(slices):
            fh.write(phantom_slice(k, slices, side).T.astype("<i2").tobytes(order="F"))


def child(src: str, dest: str, traced: bool) -> None:
    """Run one import and print its numbers (called in a fresh process)."""
    import tracemalloc

    # Imported before measuring: module code is not the import's memory.
    import nibabel  # noqa: F401
    import pydicom.pixels  # noqa: F401

    from radconcord.backend.imaging.volume import open_volume
    from radconcord.backend.imaging.volume_store import VolumeStore

    reset = _reset_peak()
    before_rss = _status_kib("VmRSS")
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    if traced:
        tracemalloc.start()
    t0 = time.perf_counter()
    source = open_volume(src, modality="CT")
    t_header = time.perf_counter() - t0
    store = VolumeStore.write(source, dest)
    seconds = time.perf_counter() - t0
    out = {"import_s": round(seconds, 3), "headers_s": round(t_header, 3),
           "dtype": str(store.dtype), "shape": list(store.shape)}
    if traced:
        out["tracemalloc_peak_mib"] = round(tracemalloc.get_traced_memory()[1] / 2**20, 1)
        tracemalloc.stop()
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    # ru_maxrss keeps the high-water mark the process inherited at fork (the parent's), so
    # the delta is a lower bound; VmHWM after clear_refs is this import's own peak.
    out["ru_maxrss_before_mib"] = round(before / 1024, 1)
    out["ru_maxrss_delta_mib"] = round((after - before) / 1024, 1)
    if reset and before_rss is not None:
        peak = _status_kib("VmHWM")
        out["rss_before_mib"] = round(before_rss / 1024, 1)
        out["rss_peak_mib"] = round(peak / 1024, 1)
        out["rss_peak_delta_mib"] = round((peak - before_rss) / 1024, 1)
    print(json.dumps(out))


def _status_kib(key: str) -> int | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return None


def _reset_peak() -> bool:
    """Reset VmHWM to the current RSS (Linux 4.0+: write 5 to clear_refs)."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def run_child(src: Path, dest: Path, traced: bool = False) -> dict:
    cmd = [sys.executable, __file__, "--child", str(src), str(dest)]
    if traced:
        cmd.append("--traced")
    done = subprocess.run(cmd, check=True, capture_output=True, text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def time_ms(fn, indices) -> dict:
    times = []
    for index in indices:
        t0 = time.perf_counter()
        fn(int(index))
        times.append((time.perf_counter() - t0) * 1000)
    return {"median_ms": round(statistics.median(times), 3),
            "max_ms": round(max(times), 3), "first_ms": round(times[0], 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--slices", type=int, default=400)
    parser.add_argument("--side", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--nifti", action="store_true")
    parser.add_argument("--child", nargs=2)
    parser.add_argument("--traced", action="store_true")
    args = parser.parse_args()
    if args.child:
        child(*args.child, traced=args.traced)
        return

    import pydicom

    from radconcord.backend.imaging.volume_store import VolumeStore

    result: dict = {"volume": [args.slices, args.side, args.side], "dtype": "int16 series"}
    with tempfile.TemporaryDirectory(prefix="bench_volume_") as tmp:
        folder = Path(tmp) / "series"
        t0 = time.perf_counter()
        write_series(folder, args.slices, args.side)
        result["generate_s"] = round(time.perf_counter() - t0, 2)
        result["import"] = run_child(folder, Path(tmp) / "store")
        result["import_traced"] = run_child(folder, Path(tmp) / "store_traced", traced=True)
        if args.nifti:
            # Before the parent maps the store, whose pages would count in a child's
            # inherited ru_maxrss.
            nii = Path(tmp) / "volume.nii.gz"
            t0 = time.perf_counter()
            write_nifti(nii, args.slices, args.side)
            result["nifti_generate_s"] = round(time.perf_counter() - t0, 2)
            result["nifti_import"] = run_child(nii, Path(tmp) / "store_nifti")
        store = VolumeStore.open(Path(tmp) / "store")
        rng = np.random.default_rng(1)
        shape = store.shape
        result["serve"] = {
            "axial": time_ms(store.axial, rng.integers(0, shape[0], args.repeats)),
            "coronal": time_ms(store.coronal, rng.integers(0, shape[1], args.repeats)),
            "sagittal": time_ms(store.sagittal, rng.integers(0, shape[2], args.repeats)),
            "hu_at_us": round(1000 * time_ms(
                lambda k: store.hu_at(k, 256 % shape[1], 256 % shape[2]),
                rng.integers(0, shape[0], 200))["median_ms"], 2),
        }
        files = sorted(folder.iterdir())
        result["serve"]["dicom_decode_one_slice"] = time_ms(
            lambda n: pydicom.dcmread(files[n]).pixel_array, rng.integers(0, len(files), 10))
        result["store_mib"] = round((Path(tmp) / "store" / "volume.npy").stat().st_size / 2**20,
                                    1)
        if args.nifti:
            a = VolumeStore.open(Path(tmp) / "store_nifti")
            result["nifti_matches_series"] = bool(
                np.array_equal(np.asarray(a.axial(7).pixels), store.axial(7).pixels))
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
