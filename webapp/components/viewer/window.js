// Window/level for the canvas viewer: the same arithmetic as backend/imaging/window.py.
//
// Plain script (no import/export): image_viewer.py puts it in front of viewer.js to make the
// component's one module, and tests/unit/test_viewer_window_js.py runs it in node against
// numpy. numpy works in float32 here (float32 pixels, Python floats are "weak" scalars), so
// every step is rounded with Math.fround; the 8-bit output is np.rint (round half to even).
// The result: the 8-bit grey value of every pixel equals the PNG renderer's
// (backend.imaging.render.render_array) before its downscale.

/* exported rcvRintHalfEven, rcvBrightness, rcvGrey, rcvBuildLut, rcvLutToWindow */

const rcvF = Math.fround;

/** np.rint: round to the nearest integer, halves to the even neighbour. */
function rcvRintHalfEven(x) {
  const r = Math.round(x);
  // Math.round rounds halves up; numpy rounds them to even.
  if (r - x === 0.5 && r % 2 !== 0) return r - 1;
  return r;
}

function clip01(v) {
  return v < 0 ? 0 : v > 1 ? 1 : v;
}

/**
 * Brightness in [0, 1] of a modality value through a window (stored orientation).
 * win: {center, width, function: "LINEAR" | "LINEAR_EXACT" | "SIGMOID" | "LUT"};
 * lut: {first_mapped, bits, table} for function "LUT".
 */
function rcvBrightness(x, win, lut) {
  x = rcvF(x);
  if (win.function === "LUT") {
    let idx = rcvRintHalfEven(x) - lut.first_mapped;
    const n = lut.table.length;
    idx = idx < 0 ? 0 : idx >= n ? n - 1 : idx;
    return clip01(rcvF(rcvF(lut.table[idx]) / rcvF(2 ** lut.bits - 1)));
  }
  const c = win.center;
  if (win.function === "SIGMOID") {
    const w = Math.max(win.width, 1.1754943508222875e-38);
    const t = rcvF(rcvF(-4 * rcvF(x - rcvF(c))) / rcvF(w));
    return rcvF(1 / rcvF(1 + rcvF(Math.exp(t))));
  }
  if (win.function === "LINEAR_EXACT") {
    const w = Math.max(win.width, 1.1754943508222875e-38);
    return clip01(rcvF(rcvF(rcvF(x - rcvF(c)) / rcvF(w)) + 0.5));
  }
  // DICOM LINEAR (PS3.3 C.11.2.1.2.1), width below 1 treated as 1 (a threshold).
  const w = Math.max(win.width, 1);
  if (w === 1) return x > rcvF(c - 0.5) ? 1 : 0;
  return clip01(rcvF(rcvF(rcvF(x - rcvF(c - 0.5)) / rcvF(w - 1)) + 0.5));
}

/** 8-bit grey as shown: windowed, MONOCHROME1 flipped, then the user's invert. */
function rcvGrey(x, win, lut, flip) {
  let b = rcvBrightness(x, win, lut);
  if (flip) b = rcvF(1 - b);
  const g = rcvRintHalfEven(rcvF(b * 255));
  return g !== g ? 0 : g; // NaN pixels show black
}

/**
 * Grey level of every integer value lo..hi, as packed opaque RGBA (little-endian 0xAABBGGRR),
 * ready to be written into an ImageData through a Uint32Array view.
 */
function rcvBuildLut(win, lut, flip, lo, hi) {
  const out = new Uint32Array(hi - lo + 1);
  for (let v = lo; v <= hi; v++) {
    const g = rcvGrey(v, win, lut, flip);
    out[v - lo] = 0xff000000 | (g << 16) | (g << 8) | g;
  }
  return out;
}

/** A linear window close to a VOI LUT table: where the table leaves its floor and ceiling. */
function rcvLutToWindow(lut) {
  const t = lut.table;
  let lo = t[0];
  let hi = t[0];
  for (let i = 1; i < t.length; i++) {
    if (t[i] < lo) lo = t[i];
    if (t[i] > hi) hi = t[i];
  }
  let a = 0;
  while (a < t.length - 1 && t[a] <= lo) a++;
  let b = t.length - 1;
  while (b > 0 && t[b] >= hi) b--;
  if (b < a) [a, b] = [0, t.length - 1];
  return {
    center: lut.first_mapped + (a + b) / 2,
    width: Math.max(1, b - a + 1),
    function: "LINEAR",
  };
}
