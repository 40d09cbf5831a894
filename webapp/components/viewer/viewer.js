// RadConcord's canvas film viewer (a Streamlit v2 component; window.js is put in front).
//
// One viewer per page: a toolbar (window presets, invert, sync W/L, drag mode, reset,
// fullscreen), one pane per image side by side, a help line. Each pane fetches the image's
// modality values from GET _rc/api/images/<id>/pixels at the resolution its canvas needs
// (canvas size x devicePixelRatio; the full resolution once zoomed past it) and windows them
// here, through a lookup table, so a W/L change never waits for the server.
//
// A volume (CT/MR, item.volume) gets a VolumePane: one plane at a time from
// GET _rc/api/images/<id>/plane?plane=axial|coronal|sagittal&index=k (raw values, HU for CT,
// windowed here like a film), drawn with the plane's pixel spacing (anisotropic voxels are
// not squashed). Wheel, ArrowUp/ArrowDown, PageUp/PageDown, Home/End and a slider move
// through the slices; Axial/Coronal/Sagittal switch the plane, keeping the window (one W/L
// for every plane); the HU under the pointer is shown. Neighbouring planes are prefetched
// (a window of PREFETCH_RADIUS each side), and at most SLICE_CACHE planes are kept, so the
// browser's memory stays bounded whatever the volume's size. "3 planes" shows axial,
// coronal and sagittal instead (three VolumePanes of one volume sharing a link), side by side
// or, in a narrow column, the first large and the other two stacked beside it (layout()):
// a crosshair in each marks where the other two cut it, a click moves the other two planes
// to the point clicked, and the window is one for the three.
//
// Streamlit calls the default export again whenever the page reruns (same parentElement):
// the viewer keeps its state and starts afresh (zoom, pan, manual window) only when the pair
// changes. Keys: only the viewer's own (0, I) are handled, and only while it has focus; the
// page's shortcuts (N, P, Ctrl+Enter) pass through untouched.

const VIEWERS = new WeakMap();
const PRESET_LABELS = [["auto", "Auto"], ["header", "Header"], ["lung", "Lung"],
  ["mediastinum", "Mediastinum"], ["bone", "Bone"], ["manual", "Manual"]];
// Volumes: the planes, the slices prefetched each side of the one shown, the planes kept.
const VOLUME_PLANES = [["axial", "Axial"], ["coronal", "Coronal"], ["sagittal", "Sagittal"]];
const PREFETCH_RADIUS = 8;
const SLICE_CACHE = 48;
const PREFETCH_CONCURRENCY = 3;
// Wheel distance (pixel mode) per slice: one notch of a mouse wheel is 100.
const WHEEL_PER_SLICE = 100;
// Height of a volume pane's strip (plane buttons, slider) under its canvas, CSS pixels.
const VOLBAR_PX = 34;
// Below this width per plane, "3 planes" stacks two of them beside the first (see layout()).
const MPR_STACK_BELOW_PX = 300;
// Keys that move through a volume's slices (ArrowLeft/ArrowRight still pan).
const VOLUME_KEYS = { ArrowUp: true, ArrowDown: true, PageUp: true, PageDown: true, Home: true,
  End: true };
// The window event that moves the focus between the film and the count grid (key V in
// either; the grid listens for FOCUS_GRID, the viewer for FOCUS_VIEWER).
const FOCUS_GRID = "radconcord:focus-grid";
const FOCUS_VIEWER = "radconcord:focus-viewer";
const PREFS_KEY = "rc-viewer-prefs";
const SPLIT_PREFIX = "rc-film-split:"; // + the rater's opaque tag: the film column's share
const SPLIT_MIN = 30; // percent of the row
const SPLIT_MAX = 85;
const MIN_ZOOM = 0.5;
const MAX_ZOOM = 32;
// Drag sensitivity for W/L: a drag across 512 CSS pixels spans the image's value range.
const WL_DRAG_SPAN = 512;

const FILM_HELP = "Wheel/pinch zoom · drag pan · right- or Shift+drag: window (\u2194 width, " +
  "\u2195 level) · double-click or 0: fit · 1: 100% · +/- zoom · arrows pan · I invert · " +
  "V: to the count grid";
const VOLUME_HELP = "Volume: wheel, \u2191/\u2193, PgUp/PgDn, Home/End or the slider: slices · " +
  "Ctrl+wheel/pinch zoom · drag pan · right- or Shift+drag: window (all planes) · " +
  "0: fit · I invert · V: to the count grid";

function el(tag, cls, text) {
  const node = document.createElement(tag);
  if (cls) node.className = cls;
  if (text !== undefined) node.textContent = text;
  return node;
}

function loadPrefs() {
  try {
    return JSON.parse(window.localStorage.getItem(PREFS_KEY) || "{}") || {};
  } catch (_err) {
    return {};
  }
}

/** W/L as shown on the film: whole numbers (an 8-bit centre of 127.5 reads 128). */
function fmtWindow(v) {
  if (v === null || v === undefined || !Number.isFinite(v)) return "-";
  return String(Math.round(v));
}

function fmtNumber(v) {
  if (v === null || v === undefined || !Number.isFinite(v)) return "-";
  const a = Math.abs(v);
  if (Number.isInteger(v) || a >= 1000) return String(Math.round(v));
  if (a >= 1) return String(+v.toFixed(1)); // 127.5 stays 127.5 (an 8-bit film's centre)
  return v.toPrecision(3);
}

/** Parse an RCPX body (webapp/api/images.py): header JSON + little-endian values. */
function parsePixels(buffer) {
  const bytes = new Uint8Array(buffer, 0, 8);
  const magic = String.fromCharCode(bytes[0], bytes[1], bytes[2], bytes[3]);
  if (magic !== "RCPX") throw new Error("unexpected answer from the image server");
  const length = new DataView(buffer).getUint32(4, true);
  const header = JSON.parse(new TextDecoder().decode(new Uint8Array(buffer, 8, length)));
  const offset = 8 + length;
  const n = header.rows * header.cols;
  const Type = { uint16: Uint16Array, int16: Int16Array, float32: Float32Array }[header.dtype];
  if (!Type) throw new Error(`unknown pixel type ${header.dtype}`);
  // Little-endian on every browser platform in use; the server sends little-endian.
  const values = new Type(buffer, offset, n);
  return { header, values };
}

class Pane {
  constructor(viewer, item, index) {
    this.viewer = viewer;
    this.item = item;
    this.index = index;
    this.root = el("div", "rcv-pane");
    this.root.dataset.imageId = String(item.image_id);
    this.root.rcvPane = this; // for the browser tests (the windowed film, its timings)
    this.canvas = el("canvas", "rcv-canvas");
    this.canvas.setAttribute("aria-label", `${item.caption}: film`);
    this.caption = el("div", "rcv-ov rcv-ov-tl", item.caption);
    this.wlText = el("div", "rcv-ov rcv-ov-bl", "");
    this.zoomText = el("div", "rcv-ov rcv-ov-br", "");
    this.status = el("div", "rcv-status", "Loading image...");
    this.root.append(this.canvas, this.caption, this.wlText, this.zoomText, this.status);
    this.src = document.createElement("canvas"); // the windowed film at data resolution
    this.img = null; // {header, values}
    this.win = null; // {center, width, function}
    this.preset = "auto";
    this.zoom = 1;
    this.panX = 0;
    this.panY = 0;
    this.cssW = 0;
    this.cssH = 0;
    this.loadingSide = 0;
    this.abort = null;
    this.pendingEvent = null;
    this.frame = 0;
  }

  // ----- data -----

  fullSide() {
    const h = this.img ? this.img.header : null;
    return h ? Math.max(h.full_rows, h.full_cols) : 0;
  }

  dataSide() {
    const h = this.img ? this.img.header : null;
    return h ? Math.max(h.rows, h.cols) : 0;
  }

  /** Longest side, in device pixels, that the film covers on screen now. */
  neededSide() {
    const dpr = window.devicePixelRatio || 1;
    if (!this.img) return Math.ceil(Math.max(this.cssW, this.cssH) * dpr);
    return Math.ceil(this.fullSide() * this.scale() * dpr);
  }

  ensureResolution() {
    if (this.cssW < 2 || this.cssH < 2) return;
    const needed = this.neededSide();
    if (this.img) {
      const have = this.dataSide();
      if (have >= this.fullSide() || have >= needed) return;
    }
    if (this.loadingSide >= needed) return;
    if (!this.img) {
      // The first fetch waits for the page to settle (Streamlit is still drawing the
      // elements above), so that it asks for the size the pane ends up with.
      clearTimeout(this.firstTimer);
      this.firstTimer = setTimeout(() => {
        if (!this.img && !this.viewer.destroyed) this.load(this.neededSide());
      }, 120);
      return;
    }
    this.load(needed);
  }

  load(side) {
    this.loadingSide = side;
    if (this.abort) this.abort.abort();
    const abort = new AbortController();
    this.abort = abort;
    if (!this.img) this.setStatus("Loading image...");
    const url = `${this.item.url}?max_side=${Math.max(16, side)}`;
    const started = performance.now();
    fetch(url, { credentials: "same-origin", signal: abort.signal, cache: "no-store" })
      .then(async (resp) => {
        if (!resp.ok) {
          let message = `image could not be loaded (HTTP ${resp.status})`;
          try {
            const body = await resp.json();
            if (body && body.message) message = body.message;
          } catch (_err) {
            /* keep the HTTP status */
          }
          throw new Error(message);
        }
        return resp.arrayBuffer();
      })
      .then((buffer) => {
        if (abort.signal.aborted || this.viewer.destroyed) return;
        const first = !this.img;
        this.img = parsePixels(buffer);
        this.root.dataset.loadMs = String(Math.round(performance.now() - started));
        this.loadingSide = 0;
        this.setStatus("");
        if (first) this.viewer.paneLoaded(this);
        this.renderWindow();
      })
      .catch((err) => {
        if (abort.signal.aborted || err.name === "AbortError") return;
        this.loadingSide = 0;
        if (!this.img) this.setStatus(`${this.item.caption}: ${err.message}`, true);
      });
  }

  setStatus(text, error) {
    this.status.textContent = text;
    this.status.hidden = !text;
    this.status.classList.toggle("rcv-error", Boolean(error));
  }

  // ----- windowing -----

  headerLinear() {
    const h = this.img.header;
    const p = h.presets.header;
    if (p.lut && h.voi_lut) return rcvLutToWindow(h.voi_lut);
    return { center: p.center, width: p.width, function: p.function };
  }

  applyPreset(name) {
    if (!this.img) {
      this.preset = name;
      return;
    }
    const h = this.img.header;
    // A preset this image has not (Mediastinum, chosen on a CT, for a film): its Auto.
    if (name !== "manual" && !h.presets[name]) name = "auto";
    this.preset = name;
    if (name === "manual") {
      this.win = this.headerLinear();
    } else {
      const p = h.presets[name];
      this.win = p.lut ? { center: null, width: null, function: "LUT" }
        : { center: p.center, width: p.width, function: p.function };
    }
  }

  /** Value units per CSS pixel of a W/L drag: the film's value range over 512 pixels. */
  dragStep() {
    const h = this.img.header;
    return Math.max(h.pixel_max - h.pixel_min, 1) / WL_DRAG_SPAN;
  }

  /** Films whose values mean the same (same format, bit depth, units): sync by value. */
  comparable(other) {
    const a = this.img.header;
    const b = other.img.header;
    return a.format === b.format && a.bits_stored === b.bits_stored && a.values === b.values;
  }

  /** Adjust by a mouse drag of (dx, dy) CSS pixels: right = wider, down = higher centre. */
  dragWindow(dx, dy, k) {
    if (!this.img) return;
    const h = this.img.header;
    if (this.win.function === "LUT") this.win = rcvLutToWindow(h.voi_lut);
    const minWidth = this.win.function === "LINEAR" ? 1 : 1e-3;
    this.win = {
      center: this.win.center + dy * k,
      width: Math.max(minWidth, this.win.width + dx * k),
      function: this.win.function,
    };
    this.preset = "manual";
  }

  setManual(center, width) {
    if (!this.img) return;
    const fn = this.win && this.win.function !== "LUT" ? this.win.function : "LINEAR";
    this.win = { center, width: Math.max(fn === "LINEAR" ? 1 : 1e-3, width), function: fn };
    this.preset = "manual";
  }

  flip() {
    return Boolean(this.img.header.monochrome1) !== Boolean(this.viewer.invert);
  }

  /** Window the data into the source canvas, then draw (timing the whole W/L change). */
  renderWindow(event) {
    if (!this.img) return;
    if (!this.win) this.applyPreset(this.preset);
    const t0 = performance.now();
    const { header, values } = this.img;
    const rows = header.rows;
    const cols = header.cols;
    if (this.src.width !== cols || this.src.height !== rows) {
      this.src.width = cols;
      this.src.height = rows;
      this.imageData = null;
    }
    const sctx = this.src.getContext("2d");
    if (!this.imageData) this.imageData = sctx.createImageData(cols, rows);
    const out = new Uint32Array(this.imageData.data.buffer);
    const lut = header.voi_lut;
    const flip = this.flip();
    const n = rows * cols;
    if (header.dtype === "float32") {
      for (let i = 0; i < n; i++) {
        const g = rcvGrey(values[i], this.win, lut, flip);
        out[i] = 0xff000000 | (g << 16) | (g << 8) | g;
      }
    } else {
      // Integer values: one table entry per value of the image's range.
      const lo = Math.round(header.pixel_min);
      const hi = Math.round(header.pixel_max);
      const table = rcvBuildLut(this.win, lut, flip, lo, hi);
      const last = table.length - 1;
      for (let i = 0; i < n; i++) {
        let k = values[i] - lo;
        k = k < 0 ? 0 : k > last ? last : k;
        out[i] = table[k];
      }
    }
    sctx.putImageData(this.imageData, 0, 0);
    this.draw();
    const t1 = performance.now();
    this.root.dataset.windowMs = (t1 - t0).toFixed(1);
    this.updateOverlay();
    if (event) {
      // Input-to-frame latency: from the event's timestamp to the frame that shows it.
      const since = event.timeStamp;
      requestAnimationFrame(() => {
        const latency = performance.now() - since;
        this.root.dataset.wlLatencyMs = latency.toFixed(1);
        this.viewer.root.dataset.wlLatencyMs = latency.toFixed(1);
      });
    }
    this.viewer.paneChanged(this);
  }

  /** Coalesce W/L changes into one render per animation frame. */
  scheduleWindow(event) {
    if (!this.pendingEvent) this.pendingEvent = event || { timeStamp: performance.now() };
    if (this.frame) return;
    this.frame = requestAnimationFrame(() => {
      const ev = this.pendingEvent;
      this.frame = 0;
      this.pendingEvent = null;
      this.renderWindow(ev);
    });
  }

  // ----- geometry -----

  resize(w, h) {
    this.cssW = Math.max(1, Math.floor(w));
    this.cssH = Math.max(1, Math.floor(h));
    this.root.style.width = `${this.cssW}px`;
    this.root.style.height = `${this.cssH}px`;
    const dpr = window.devicePixelRatio || 1;
    this.canvas.style.width = `${this.cssW}px`;
    this.canvas.style.height = `${this.cssH}px`;
    this.canvas.width = Math.round(this.cssW * dpr);
    this.canvas.height = Math.round(this.cssH * dpr);
    this.draw();
    this.ensureResolution();
  }

  fit() {
    const h = this.img.header;
    return Math.min(this.cssW / h.full_cols, this.cssH / h.full_rows);
  }

  scale() {
    return this.fit() * this.zoom;
  }

  /** The film's rectangle in the canvas, CSS pixels. */
  rect() {
    const h = this.img.header;
    const s = this.scale();
    const w = h.full_cols * s;
    const hh = h.full_rows * s;
    return { x: this.cssW / 2 - w / 2 + this.panX, y: this.cssH / 2 - hh / 2 + this.panY, w, h: hh };
  }

  clampPan() {
    const r = this.rect();
    // Keep at least a fifth of the film (or of the pane) in view.
    const keepX = 0.2 * Math.min(this.cssW, r.w);
    const keepY = 0.2 * Math.min(this.cssH, r.h);
    const maxX = (this.cssW + r.w) / 2 - keepX;
    const maxY = (this.cssH + r.h) / 2 - keepY;
    this.panX = Math.max(-maxX, Math.min(maxX, this.panX));
    this.panY = Math.max(-maxY, Math.min(maxY, this.panY));
  }

  draw() {
    const ctx = this.canvas.getContext("2d");
    const dpr = window.devicePixelRatio || 1;
    ctx.setTransform(1, 0, 0, 1, 0, 0);
    ctx.fillStyle = "#000";
    ctx.fillRect(0, 0, this.canvas.width, this.canvas.height);
    if (!this.img || !this.src.width) return;
    const r = this.rect();
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.imageSmoothingEnabled = true;
    ctx.imageSmoothingQuality = "high";
    ctx.drawImage(this.src, r.x, r.y, r.w, r.h);
    this.root.dataset.drawn = JSON.stringify({
      x: +r.x.toFixed(2), y: +r.y.toFixed(2), w: +r.w.toFixed(2), h: +r.h.toFixed(2),
    });
    this.root.dataset.zoom = this.zoom.toFixed(4);
    this.root.dataset.dataSide = String(this.dataSide());
    this.root.dataset.fullSide = String(this.fullSide());
    // 100% = one image pixel per screen (device) pixel, not "fits the pane".
    this.root.dataset.pixelScale = (this.scale() * dpr).toFixed(4);
    this.zoomText.textContent = `${Math.round(this.scale() * dpr * 100)}%` +
      (this.dataSide() >= this.fullSide() ? " · full res" : "");
  }

  updateOverlay() {
    if (!this.img) return;
    const w = this.win;
    this.wlText.textContent = w.function === "LUT" ? "VOI LUT"
      : `W ${fmtWindow(w.width)} · C ${fmtWindow(w.center)}`;
    this.root.dataset.center = String(w.center);
    this.root.dataset.width = String(w.width);
    this.root.dataset.preset = this.preset;
  }

  zoomAt(px, py, factor) {
    if (!this.img) return;
    const before = this.rect();
    const s0 = this.scale();
    const zoom = Math.max(MIN_ZOOM, Math.min(MAX_ZOOM, this.zoom * factor));
    if (zoom === this.zoom) return;
    // The film point under the pointer stays under it.
    const u = (px - before.x) / s0;
    const v = (py - before.y) / s0;
    this.zoom = zoom;
    const s1 = this.scale();
    const h = this.img.header;
    this.panX = px - u * s1 - this.cssW / 2 + (h.full_cols * s1) / 2;
    this.panY = py - v * s1 - this.cssH / 2 + (h.full_rows * s1) / 2;
    this.clampPan();
    this.draw();
    this.ensureResolution();
  }

  pan(dx, dy) {
    if (!this.img) return;
    this.panX += dx;
    this.panY += dy;
    this.clampPan();
    this.draw();
  }

  /** One image pixel per screen pixel, around the pane's centre. */
  actualSize() {
    if (!this.img) return;
    const dpr = window.devicePixelRatio || 1;
    this.zoomAt(this.cssW / 2, this.cssH / 2, 1 / (this.scale() * dpr));
  }

  resetView() {
    this.zoom = 1;
    this.panX = 0;
    this.panY = 0;
    this.draw();
  }

  destroy() {
    clearTimeout(this.firstTimer);
    if (this.abort) this.abort.abort();
    if (this.frame) cancelAnimationFrame(this.frame);
  }
}


/** Values of one plane of a volume: spacing-aware size (full_rows/full_cols in display units). */
function parsePlane(buffer) {
  const plane = parsePixels(buffer);
  const h = plane.header;
  const [rowMm, colMm] = h.spacing;
  const unit = Math.min(rowMm, colMm);
  // The plane is drawn rows * rowMm by cols * colMm: anisotropic voxels keep their shape.
  h.full_rows = (h.rows * rowMm) / unit;
  h.full_cols = (h.cols * colMm) / unit;
  return plane;
}

class VolumePane extends Pane {
  constructor(viewer, item, index, opts = {}) {
    super(viewer, item, index);
    this.isVolume = true;
    this.root.classList.add("rcv-volume");
    this.canvas.setAttribute("aria-label", `${item.caption}: volume`);
    this.plane = opts.plane || "axial";
    // Three planes of one volume: {panes}; each pane keeps its own plane.
    this.link = opts.link || null;
    this.indices = {};
    this.counts = {};
    this.cache = new Map(); // "plane:index" -> {header, values}, oldest first
    this.inflight = new Map(); // "plane:index" -> Promise
    this.queue = [];
    this.running = 0;
    this.abortAll = new AbortController();
    this.wheelAcc = 0;
    this.hover = null;
    this.sliceText = el("div", "rcv-ov rcv-ov-tr", "");
    this.huText = el("div", "rcv-ov rcv-ov-hu", "");
    this.huText.hidden = true;
    this.bar = el("div", "rcv-volbar");
    const planes = el("div", "rcv-seg");
    planes.setAttribute("role", "radiogroup");
    planes.setAttribute("aria-label", "Plane");
    this.planeButtons = {};
    for (const [key, label] of VOLUME_PLANES) {
      const b = el("button", "rcv-btn", label);
      b.type = "button";
      b.dataset.plane = key;
      b.setAttribute("role", "radio");
      b.addEventListener("click", () => this.setPlane(key));
      planes.append(b);
      this.planeButtons[key] = b;
    }
    this.slider = el("input", "rcv-slider");
    this.slider.type = "range";
    this.slider.min = "0";
    this.slider.max = "0";
    this.slider.step = "1";
    this.slider.setAttribute("aria-label", "Slice");
    this.slider.addEventListener("input", () => this.go(parseInt(this.slider.value, 10)));
    this.sliderText = el("span", "rcv-slicepos", "");
    this.bar.append(planes, this.slider, this.sliderText);
    if (this.link) {
      planes.hidden = true;
      this.root.classList.add("rcv-linked");
      this.root.dataset.linkedPlane = this.plane;
    }
    this.root.append(this.sliceText, this.huText, this.bar);
    this.refreshPlaneButtons();
  }

  key(plane, index) {
    return `${plane}:${index}`;
  }

  /** The canvas takes the pane's height less the strip, which sits under it. */
  resize(w, h) {
    if (this.outer && this.outer[0] === Math.floor(w) && this.outer[1] === Math.floor(h)) return;
    this.outer = [Math.floor(w), Math.floor(h)];
    super.resize(w, Math.max(1, h - VOLBAR_PX));
    this.root.style.height = `${this.outer[1]}px`;
  }

  url(plane, index) {
    const q = index === null || index === undefined ? "" : `&index=${index}`;
    return `${this.item.url}?plane=${plane}${q}`;
  }

  ensureResolution() {
    if (this.cssW < 2 || this.cssH < 2 || this.img || this.started) return;
    this.started = true;
    this.setStatus("Loading volume...");
    const t0 = performance.now();
    // The middle plane first (its header gives the volume's size).
    this.fetchPlane(this.plane, null).then((plane) => {
      if (!plane || this.viewer.destroyed) return;
      const [slices, rows, cols] = plane.header.shape;
      this.counts = { axial: slices, coronal: rows, sagittal: cols };
      for (const [p] of VOLUME_PLANES) this.indices[p] = Math.floor(this.counts[p] / 2);
      this.indices[this.plane] = plane.header.index;
      this.root.dataset.loadMs = String(Math.round(performance.now() - t0));
      this.setStatus("");
      this.display(plane, null);
      this.viewer.paneLoaded(this);
      this.renderWindow();
      // From the first request to the first slice on screen (the browser tests read it).
      requestAnimationFrame(() => {
        this.root.dataset.firstMs = (performance.now() - t0).toFixed(1);
      });
      this.prefetch();
    }).catch((err) => {
      this.started = false;
      if (err.name !== "AbortError") this.setStatus(`${this.item.caption}: ${err.message}`, true);
    });
  }

  /** Fetch one plane (no index: the middle one); cached and shared between callers. */
  fetchPlane(plane, index) {
    const k = index === null ? null : this.key(plane, index);
    if (k && this.cache.has(k)) return Promise.resolve(this.cache.get(k));
    if (k && this.inflight.has(k)) return this.inflight.get(k);
    const promise = fetch(this.url(plane, index), {
      credentials: "same-origin", signal: this.abortAll.signal, cache: "no-store",
    }).then(async (resp) => {
      if (!resp.ok) {
        let message = `volume could not be loaded (HTTP ${resp.status})`;
        try {
          const body = await resp.json();
          if (body && body.message) message = body.message;
        } catch (_err) {
          /* keep the HTTP status */
        }
        throw new Error(message);
      }
      return resp.arrayBuffer();
    }).then((buffer) => {
      const parsed = parsePlane(buffer);
      this.remember(parsed);
      return parsed;
    }).finally(() => {
      if (k) this.inflight.delete(k);
    });
    if (k) this.inflight.set(k, promise);
    return promise;
  }

  remember(plane) {
    const k = this.key(plane.header.plane, plane.header.index);
    this.cache.delete(k);
    this.cache.set(k, plane);
    const current = this.key(this.plane, this.indices[this.plane]);
    while (this.cache.size > SLICE_CACHE) {
      const oldest = [...this.cache.keys()].find((key) => key !== current);
      if (oldest === undefined) break;
      this.cache.delete(oldest);
    }
    this.root.dataset.cached = String(this.cache.size);
  }

  count() {
    return this.counts[this.plane] || 0;
  }

  /** Show plane `index` of the current plane (clamped); from the cache when prefetched. */
  go(index, event) {
    const n = this.count();
    if (!n) return;
    const k = Math.max(0, Math.min(n - 1, Math.round(index)));
    this.indices[this.plane] = k;
    this.refreshSliceUi();
    this.linkChanged();
    const started = event && event.timeStamp !== undefined ? event.timeStamp : performance.now();
    const cached = this.cache.get(this.key(this.plane, k));
    if (cached) {
      this.cache.delete(this.key(this.plane, k)); // most recently used
      this.cache.set(this.key(this.plane, k), cached);
      this.display(cached, started);
    } else {
      const plane = this.plane;
      this.fetchPlane(plane, k).then((got) => {
        if (this.viewer.destroyed || this.plane !== plane || this.indices[plane] !== k) return;
        this.display(got, started);
      }).catch((err) => {
        if (err.name !== "AbortError") this.setStatus(`${this.item.caption}: ${err.message}`, true);
      });
    }
    this.prefetch();
  }

  step(delta, event) {
    this.go((this.indices[this.plane] || 0) + delta, event);
  }

  // ----- three linked planes -----

  /** The index shown along `plane` by this volume's panes (the linked one's, else ours). */
  linkedIndex(plane) {
    const other = this.link ? this.link.panes.find((p) => p.plane === plane) : null;
    const source = other && other.counts[plane] ? other : this;
    const value = source.indices[plane];
    return value === undefined ? Math.floor((this.counts[plane] || 1) / 2) : value;
  }

  linkChanged() {
    if (!this.link) return;
    for (const p of this.link.panes) if (p !== this && p.img) p.draw();
  }

  /** Where the other two planes cut this one: (col, row) of the plane's pixels. */
  crosshair() {
    const h = this.img.header;
    const slices = h.shape[0];
    const i = this.linkedIndex("sagittal");
    const j = this.linkedIndex("coronal");
    const k = this.linkedIndex("axial");
    if (this.plane === "axial") return { col: i, row: j };
    // Coronal and sagittal planes put the last slice in their first row (head up).
    if (this.plane === "coronal") return { col: i, row: slices - 1 - k };
    return { col: j, row: slices - 1 - k };
  }

  draw() {
    super.draw();
    if (!this.link || !this.img || this.img.header.plane !== this.plane) return;
    const h = this.img.header;
    const { col, row } = this.crosshair();
    const r = this.rect();
    const x = r.x + ((col + 0.5) / h.cols) * r.w;
    const y = r.y + ((row + 0.5) / h.rows) * r.h;
    const ctx = this.canvas.getContext("2d");
    ctx.save();
    ctx.strokeStyle = "rgba(255, 196, 0, 0.8)";
    ctx.lineWidth = 1;
    ctx.setLineDash([6, 4]);
    ctx.beginPath();
    ctx.moveTo(x, r.y);
    ctx.lineTo(x, r.y + r.h);
    ctx.moveTo(r.x, y);
    ctx.lineTo(r.x + r.w, y);
    ctx.stroke();
    ctx.restore();
    this.root.dataset.crosshair = JSON.stringify({ col, row, x: +x.toFixed(1), y: +y.toFixed(1) });
  }

  /** A click on one of three linked planes: the other two go through the point clicked. */
  clickAt(px, py) {
    const at = this.link ? this.valueAt(px, py) : null;
    if (!at) return;
    const slices = this.img.header.shape[0];
    const pane = (plane) => this.link.panes.find((p) => p.plane === plane);
    const moves = {
      axial: [["sagittal", at.col], ["coronal", at.row]],
      coronal: [["sagittal", at.col], ["axial", slices - 1 - at.row]],
      sagittal: [["coronal", at.col], ["axial", slices - 1 - at.row]],
    }[this.plane];
    for (const [plane, index] of moves) {
      const other = pane(plane);
      if (other && other.img) other.go(index);
    }
  }

  setPlane(plane) {
    if (plane === this.plane || !this.img) return;
    this.plane = plane;
    // Another plane has another shape: fit it again (the window stays: one W/L for all).
    this.zoom = 1;
    this.panX = 0;
    this.panY = 0;
    this.refreshPlaneButtons();
    this.go(this.indices[plane]);
  }

  display(plane, started) {
    const first = !this.img;
    this.img = plane;
    this.renderWindow();
    if (started !== null && started !== undefined) {
      const shown = performance.now();
      requestAnimationFrame(() => {
        this.root.dataset.sliceMs = (performance.now() - started).toFixed(1);
        this.root.dataset.sliceDrawMs = (shown - started).toFixed(1);
      });
    }
    if (!first) this.draw();
    this.refreshSliceUi();
    this.readHover();
  }

  prefetch() {
    const n = this.count();
    const k = this.indices[this.plane];
    const wanted = [];
    for (let d = 1; d <= PREFETCH_RADIUS; d++) {
      for (const i of [k + d, k - d]) {
        if (i >= 0 && i < n && !this.cache.has(this.key(this.plane, i))) wanted.push([this.plane, i]);
      }
    }
    // Only the neighbours of the plane on screen: the queue is replaced, not extended.
    this.queue = wanted;
    this.pump();
  }

  pump() {
    while (this.running < PREFETCH_CONCURRENCY && this.queue.length) {
      const [plane, i] = this.queue.shift();
      if (this.cache.has(this.key(plane, i)) || this.inflight.has(this.key(plane, i))) continue;
      this.running += 1;
      this.fetchPlane(plane, i).catch(() => {}).finally(() => {
        this.running -= 1;
        if (!this.viewer.destroyed) this.pump();
      });
    }
    // For the browser tests: prefetches still to come or under way.
    this.root.dataset.prefetching = String(this.running + this.queue.length);
  }

  refreshPlaneButtons() {
    for (const [key, b] of Object.entries(this.planeButtons)) {
      const on = key === this.plane;
      b.classList.toggle("rcv-on", on);
      b.setAttribute("aria-checked", String(on));
    }
  }

  refreshSliceUi() {
    const n = this.count();
    const k = this.indices[this.plane] || 0;
    const h = this.img ? this.img.header : null;
    const sameSlice = h && h.plane === this.plane && h.index === k;
    const label = VOLUME_PLANES.find(([p]) => p === this.plane)[1];
    const pos = sameSlice ? ` · ${h.position_mm.toFixed(1)} mm` : "";
    this.sliceText.textContent = `${label} ${k + 1} / ${n}${pos}`;
    this.sliderText.textContent = `${k + 1} / ${n}`;
    this.slider.max = String(Math.max(0, n - 1));
    if (document.activeElement !== this.slider || this.slider.value !== String(k)) {
      this.slider.value = String(k);
    }
    this.root.dataset.plane = this.plane;
    this.root.dataset.slice = String(k);
    this.root.dataset.sliceCount = String(n);
    if (sameSlice) {
      this.root.dataset.shownSlice = `${h.plane}:${h.index}`;
      this.root.dataset.positionMm = h.position_mm.toFixed(2);
      this.root.dataset.spacing = JSON.stringify(h.spacing);
    }
  }

  /** The value under a canvas point (CSS pixels), or null outside the plane. */
  valueAt(px, py) {
    if (!this.img) return null;
    const h = this.img.header;
    const r = this.rect();
    const col = Math.floor(((px - r.x) / r.w) * h.cols);
    const row = Math.floor(((py - r.y) / r.h) * h.rows);
    if (col < 0 || row < 0 || col >= h.cols || row >= h.rows) return null;
    return { row, col, value: this.img.values[row * h.cols + col] };
  }

  hoverAt(px, py) {
    this.hover = { px, py };
    this.readHover();
  }

  readHover() {
    const at = this.hover ? this.valueAt(this.hover.px, this.hover.py) : null;
    if (!at) {
      this.huText.hidden = true;
      delete this.root.dataset.hu;
      return;
    }
    const h = this.img.header;
    const unit = h.hounsfield ? " HU" : "";
    this.huText.hidden = false;
    this.huText.textContent = `${fmtNumber(at.value)}${unit} (${at.col}, ${at.row})`;
    this.root.dataset.hu = String(at.value);
    this.root.dataset.huAt = `${at.row},${at.col}`;
  }

  leave() {
    this.hover = null;
    this.readHover();
  }

  /** One wheel event: slices by notches (a trackpad's small deltas add up). */
  wheel(ev, unit) {
    if (ev.deltaMode === 1) {
      this.step(Math.sign(ev.deltaY) * Math.max(1, Math.round(Math.abs(ev.deltaY) / 3)), ev);
      return;
    }
    this.wheelAcc += ev.deltaY * unit;
    const steps = Math.trunc(this.wheelAcc / WHEEL_PER_SLICE);
    if (steps) {
      this.wheelAcc -= steps * WHEEL_PER_SLICE;
      this.step(steps, ev);
    }
  }

  destroy() {
    super.destroy();
    this.abortAll.abort();
    this.queue = [];
  }
}

class Viewer {
  constructor(parent) {
    this.parent = parent;
    this.destroyed = false;
    const prefs = loadPrefs();
    this.preset = PRESET_LABELS.some(([k]) => k === prefs.preset) ? prefs.preset : "auto";
    if (this.preset === "manual") this.preset = "auto";
    this.invert = Boolean(prefs.invert);
    this.sync = prefs.sync !== false;
    this.dragMode = prefs.dragMode === "wl" ? "wl" : "pan";
    this.threePlanes = Boolean(prefs.threePlanes);
    this.panes = [];
    this.active = null;
    this.pairKey = null;
    this.signature = null;
    this.drag = null;
    this.pointers = new Map();
    this.build();
  }

  savePrefs() {
    try {
      window.localStorage.setItem(PREFS_KEY, JSON.stringify({
        preset: this.preset, invert: this.invert, sync: this.sync, dragMode: this.dragMode,
        threePlanes: this.threePlanes,
      }));
    } catch (_err) {
      /* private mode: preferences last for this page only */
    }
  }

  build() {
    const root = el("div", "rcv-root");
    root.tabIndex = 0;
    root.setAttribute("role", "group");
    root.setAttribute("aria-label", "Image viewer");
    this.root = root;

    const bar = el("div", "rcv-toolbar");
    const presets = el("div", "rcv-seg");
    presets.setAttribute("role", "radiogroup");
    presets.setAttribute("aria-label", "Window");
    this.presetButtons = {};
    for (const [key, label] of PRESET_LABELS) {
      const b = el("button", "rcv-btn", label);
      b.type = "button";
      b.dataset.preset = key;
      b.setAttribute("role", "radio");
      b.title = {
        auto: "The header window when it suits the film, else one from the film's own " +
          "histogram inside the body",
        header: "The window stored in the image header (PNG/JPEG: as stored)",
        lung: "Spread the grey levels over the lungs",
        bone: "Spread the grey levels over bone and the mediastinum (CT: W 1800 / L 400)",
        mediastinum: "CT: soft tissue of the mediastinum (W 400 / L 40)",
        manual: "Type a centre and width (starts from the header window)",
      }[key];
      b.addEventListener("click", () => this.choosePreset(key));
      presets.append(b);
      this.presetButtons[key] = b;
    }
    this.invertBtn = this.toggle("Invert", "Invert the grey scale (I)", () => {
      this.invert = !this.invert;
      this.savePrefs();
      this.refreshToolbar();
      for (const p of this.panes) p.scheduleWindow();
    });
    this.syncBtn = this.toggle("Sync W/L", "Change the window of all images together", () => {
      this.sync = !this.sync;
      this.savePrefs();
      this.refreshToolbar();
    });
    this.modeBtn = this.toggle("W/L drag", "Left-drag adjusts the window instead of panning", () => {
      this.dragMode = this.dragMode === "wl" ? "pan" : "wl";
      this.savePrefs();
      this.refreshToolbar();
    });
    this.planesBtn = this.toggle("3 planes", "A volume: axial, coronal and sagittal side by " +
      "side, linked by a crosshair (a click moves the other two planes there)", () => {
      this.threePlanes = !this.threePlanes;
      this.savePrefs();
      this.rebuildPanes();
    });
    const reset = el("button", "rcv-btn", "Reset");
    reset.type = "button";
    reset.title = "Fit the whole film again (0 or double-click)";
    reset.addEventListener("click", () => this.resetViews());
    const full = el("button", "rcv-btn", "Full screen");
    full.type = "button";
    full.title = "Show the images on the whole screen (Esc to leave)";
    full.addEventListener("click", () => this.toggleFullscreen());
    this.fullBtn = full;
    this.panelBtn = this.toggle("Panel", "Full screen: show or hide the grid and reports " +
      "beside the film (H)", () => this.togglePanel());
    this.panelBtn.classList.add("rcv-on");
    this.panelBtn.setAttribute("aria-pressed", "true");
    this.panelBtn.hidden = true; // only in full screen with a split
    bar.append(presets, this.invertBtn, this.syncBtn, this.modeBtn, this.planesBtn, reset, full,
      this.panelBtn);

    const manual = el("div", "rcv-manual");
    this.centerInput = this.numberInput("Center");
    this.widthInput = this.numberInput("Width");
    this.rangeText = el("span", "rcv-range", "");
    manual.append(this.centerInput.label, this.widthInput.label, this.rangeText);
    this.manualRow = manual;

    this.panesBox = el("div", "rcv-panes");
    this.help = el("div", "rcv-help", FILM_HELP);
    root.append(bar, manual, this.panesBox, this.help);
    this.parent.append(root);
    this.bindEvents();
    this.refreshToolbar();
  }

  toggle(label, title, onClick) {
    const b = el("button", "rcv-btn rcv-toggle", label);
    b.type = "button";
    b.title = title;
    b.addEventListener("click", onClick);
    return b;
  }

  numberInput(name) {
    const label = el("label", "rcv-num");
    label.append(el("span", "", name));
    const input = el("input", "");
    input.type = "number";
    input.setAttribute("aria-label", `Window ${name.toLowerCase()}`);
    input.addEventListener("change", () => this.manualChanged());
    label.append(input);
    return { label, input };
  }

  // ----- data from Python -----

  update(data) {
    this.splitOwner = (data && data.split_owner) || null;
    // The column exists once Streamlit has drawn it: set the split up now and after.
    this.setupSplit();
    setTimeout(() => this.setupSplit(), 0);
    const images = (data && data.images) || [];
    const signature = JSON.stringify(images.map((i) => [i.image_id, i.url]));
    const pairKey = data ? data.pair_key : null;
    if (pairKey === this.pairKey && signature === this.signature) {
      this.layout();
      return;
    }
    this.pairKey = pairKey;
    this.signature = signature;
    for (const p of this.panes) p.destroy();
    this.panesBox.replaceChildren();
    // A new case: zoom, pan and any manual window start afresh; the preset choice stays.
    if (this.preset === "manual") this.preset = "auto";
    this.images = images;
    this.panes = this.makePanes(images);
    for (const p of this.panes) {
      p.preset = this.preset;
      this.panesBox.append(p.root);
    }
    this.active = this.panes[0] || null;
    this.root.dataset.pairKey = String(pairKey);
    this.root.dataset.ready = "false";
    this.refreshToolbar();
    this.layout();
    // Streamlit may still be laying out the elements above: settle the height again.
    for (const ms of [50, 250, 800, 2000]) setTimeout(() => this.layout(), ms);
  }

  /** One pane per film; a volume gets one, or three linked ones (axial, coronal, sagittal). */
  makePanes(images) {
    const panes = [];
    images.forEach((item, i) => {
      if (!item.volume) {
        panes.push(new Pane(this, item, i));
      } else if (!this.threePlanes) {
        panes.push(new VolumePane(this, item, i));
      } else {
        const link = { panes: [] };
        for (const [plane] of VOLUME_PLANES) {
          const pane = new VolumePane(this, item, i, { plane, link });
          link.panes.push(pane);
          panes.push(pane);
        }
      }
    });
    return panes;
  }

  /** One plane or three: new panes for the same images, keeping the window in use. */
  rebuildPanes() {
    const old = this.panes.find((p) => p.isVolume && p.win);
    const kept = old ? { win: { ...old.win }, preset: old.preset } : null;
    for (const p of this.panes) p.destroy();
    this.panesBox.replaceChildren();
    this.panes = this.makePanes(this.images || []);
    for (const p of this.panes) {
      p.preset = kept && p.isVolume ? kept.preset : this.preset;
      if (kept && p.isVolume) p.keptWin = kept.win;
      this.panesBox.append(p.root);
    }
    this.active = this.panes.find((p) => p.isVolume) || this.panes[0] || null;
    this.root.dataset.ready = "false";
    this.refreshToolbar();
    this.layout();
  }

  paneLoaded(pane) {
    // Manual (after a drag on the other film, say) starts from this film's header window.
    pane.applyPreset(pane.preset);
    if (pane.keptWin) {
      // From one plane to three (or back): the window the rater was using stays.
      pane.win = pane.keptWin;
      pane.keptWin = null;
    }
    this.refreshToolbar();
  }

  paneChanged(pane) {
    if (pane === this.active) this.refreshManual();
    this.root.dataset.ready = String(this.panes.every((p) => p.img));
  }

  // ----- layout -----

  layout() {
    if (this.destroyed || !this.panes.length) return;
    const fs = document.fullscreenElement;
    const full = Boolean(fs && fs.contains(this.root));
    const boxWidth = this.panesBox.clientWidth || this.root.clientWidth;
    let height;
    if (full) {
      height = window.innerHeight - this.panesBox.getBoundingClientRect().top - this.help.offsetHeight - 12;
    } else {
      // The whole film at first sight: the panes end where the window ends (the page's top,
      // not the scroll position, so a scrolled page keeps the same size).
      const top = this.panesBox.getBoundingClientRect().top + window.scrollY;
      height = window.innerHeight - top - this.help.offsetHeight - 12;
      // Far down a page (the admin's explorer): a film the height of most of the window,
      // reached by scrolling, rather than a strip.
      if (height < 0.45 * window.innerHeight) height = 0.8 * window.innerHeight;
    }
    height = Math.max(160, Math.floor(height));
    const gap = 4;
    const each = (boxWidth - gap * (this.panes.length - 1)) / this.panes.length;
    let sizes = this.panes.map(() => [each, height]);
    const linked = this.panes.length === 3 && this.panes[0].link &&
      this.panes.every((p) => p.link === this.panes[0].link);
    // Three planes side by side are too narrow to read on a laptop's column (about 170 px
    // each at 1280 px): the first plane large and the other two stacked beside it, as the
    // reading room's "1 + 2" layout. data-layout tells the tests which one is drawn.
    const stack = linked && each < MPR_STACK_BELOW_PX;
    this.panesBox.classList.toggle("rcv-stack", stack);
    this.panesBox.dataset.layout = linked ? (stack ? "stack" : "row") : "";
    if (stack) {
      const side = Math.floor((boxWidth - gap) / 3);
      const main = Math.floor(boxWidth - gap - side);
      const half = Math.floor((height - gap) / 2);
      this.panesBox.style.gridTemplateColumns = `${main}px ${side}px`;
      this.panesBox.style.gridTemplateRows = `${half}px ${half}px`;
      sizes = [[main, 2 * half + gap], [side, half], [side, half]];
    } else {
      this.panesBox.style.gridTemplateColumns = "";
      this.panesBox.style.gridTemplateRows = "";
    }
    this.panes.forEach((p, i) => {
      const [w, h] = sizes[i];
      if (Math.abs(p.cssW - Math.floor(w)) > 0 || Math.abs(p.cssH - h) > 0) {
        p.resize(w, h);
        if (p.img) p.clampPan();
      }
    });
  }

  /** What full screen shows: with a split, the film AND the grid's column (the grid stays
   * reachable, in a side panel that P collapses); else the viewer alone. */
  fullTarget() {
    return this.splitRow() ? this.splitRow().closest("[class*='st-key-']") || this.root
      : this.root;
  }

  toggleFullscreen() {
    if (document.fullscreenElement) {
      document.exitFullscreen();
    } else {
      const target = this.fullTarget();
      if (target.requestFullscreen) target.requestFullscreen().catch(() => {});
    }
  }

  // ----- the split between the film and the next column (the grid and reports) -----

  splitRow() {
    if (!this.splitOwner) return null;
    const col = this.root.closest('[data-testid="stColumn"]');
    const row = col ? col.parentElement : null;
    return row && row.querySelectorAll(':scope > [data-testid="stColumn"]').length === 2
      ? row : null;
  }

  splitKey() {
    return `${SPLIT_PREFIX}${this.splitOwner}`;
  }

  savedSplit() {
    try {
      const v = parseFloat(window.localStorage.getItem(this.splitKey()));
      return Number.isFinite(v) ? Math.max(SPLIT_MIN, Math.min(SPLIT_MAX, v)) : null;
    } catch (_err) {
      return null;
    }
  }

  /** Give the film column `pct` percent of the row (the other column the rest). */
  applySplit(pct) {
    const row = this.splitRow();
    if (!row) return;
    const [film, other] = row.querySelectorAll(':scope > [data-testid="stColumn"]');
    const hidden = this.panelHidden && Boolean(document.fullscreenElement);
    other.style.display = hidden ? "none" : "";
    const basis = hidden ? "100%" : `calc(${pct}% - 0.5rem)`;
    Object.assign(film.style, { flex: `0 0 ${basis}`, width: basis, maxWidth: basis });
    Object.assign(other.style, { flex: "1 1 0", width: "auto", minWidth: "0" });
    this.root.dataset.split = String(pct);
  }

  setupSplit() {
    if (!this.splitOwner || this.splitHandle) {
      if (this.splitOwner && this.split) this.applySplit(this.split);
      return;
    }
    const handle = el("div", "rcv-split");
    handle.setAttribute("role", "separator");
    handle.setAttribute("aria-orientation", "vertical");
    handle.setAttribute("aria-label", "Drag to share the width between the film and the reports");
    handle.title = "Drag: more film or more report";
    this.root.append(handle);
    this.splitHandle = handle;
    this.split = this.savedSplit();
    if (this.split) this.applySplit(this.split);
    handle.addEventListener("pointerdown", (ev) => {
      const row = this.splitRow();
      if (!row || ev.button !== 0) return;
      ev.preventDefault();
      ev.stopPropagation();
      handle.setPointerCapture(ev.pointerId);
      const move = (e) => {
        const box = row.getBoundingClientRect();
        const pct = ((e.clientX - box.left) / box.width) * 100;
        this.split = Math.max(SPLIT_MIN, Math.min(SPLIT_MAX, Math.round(pct * 10) / 10));
        this.applySplit(this.split);
      };
      const up = () => {
        handle.removeEventListener("pointermove", move);
        handle.removeEventListener("pointerup", up);
        handle.removeEventListener("pointercancel", up);
        try {
          window.localStorage.setItem(this.splitKey(), String(this.split));
        } catch (_err) {
          /* private mode: the split lasts for this page */
        }
        this.layout();
      };
      handle.addEventListener("pointermove", move);
      handle.addEventListener("pointerup", up);
      handle.addEventListener("pointercancel", up);
    });
  }

  togglePanel() {
    const pct = this.currentSplit(); // measured before the panel goes
    this.panelHidden = !this.panelHidden;
    this.panelBtn.classList.toggle("rcv-on", !this.panelHidden);
    this.panelBtn.setAttribute("aria-pressed", String(!this.panelHidden));
    this.applySplit(pct);
    this.layout();
  }

  /** The film column's share: the dragged one, else the page's own, measured once while
   * the panel is there (with the panel hidden the film column is the whole row, and a share
   * measured then brought the panel back under the film, not beside it). */
  currentSplit() {
    if (this.split) return this.split;
    if (!this.layoutSplit) this.layoutSplit = this.defaultSplit();
    return this.layoutSplit;
  }

  defaultSplit() {
    const row = this.splitRow();
    const col = this.root.closest('[data-testid="stColumn"]');
    if (!row || !col) return 55;
    return Math.round((col.getBoundingClientRect().width / row.getBoundingClientRect().width) * 1000) / 10;
  }

  // ----- toolbar -----

  targets() {
    if (this.sync || !this.active) return this.panes;
    // Three planes of one volume share one window.
    return this.active.link ? this.active.link.panes : [this.active];
  }

  choosePreset(key) {
    this.preset = key;
    if (key !== "manual") this.savePrefs();
    for (const p of this.targets()) {
      p.applyPreset(key);
      p.scheduleWindow();
    }
    this.refreshToolbar();
  }

  manualChanged() {
    const c = parseFloat(this.centerInput.input.value);
    const w = parseFloat(this.widthInput.input.value);
    if (!Number.isFinite(c) || !Number.isFinite(w) || w <= 0) {
      this.refreshManual();
      return;
    }
    for (const p of this.targets()) {
      p.setManual(c, w);
      p.scheduleWindow();
    }
    this.preset = "manual";
    this.refreshToolbar();
  }

  refreshToolbar() {
    const shown = this.active ? this.active.preset : this.preset;
    const volumes = this.panes.some((p) => p.isVolume);
    this.presetButtons.mediastinum.hidden = !volumes;
    this.planesBtn.hidden = !volumes;
    this.planesBtn.classList.toggle("rcv-on", this.threePlanes);
    this.planesBtn.setAttribute("aria-pressed", String(this.threePlanes));
    this.help.textContent = volumes ? VOLUME_HELP : FILM_HELP;
    for (const [key, b] of Object.entries(this.presetButtons)) {
      const on = key === shown;
      b.classList.toggle("rcv-on", on);
      b.setAttribute("aria-checked", String(on));
    }
    this.invertBtn.classList.toggle("rcv-on", this.invert);
    this.invertBtn.setAttribute("aria-pressed", String(this.invert));
    this.syncBtn.classList.toggle("rcv-on", this.sync);
    this.syncBtn.setAttribute("aria-pressed", String(this.sync));
    this.syncBtn.hidden = this.panes.length < 2;
    this.modeBtn.classList.toggle("rcv-on", this.dragMode === "wl");
    this.modeBtn.setAttribute("aria-pressed", String(this.dragMode === "wl"));
    for (const p of this.panes) {
      p.root.classList.toggle("rcv-active", !this.sync && this.panes.length > 1 && p === this.active);
    }
    const wasHidden = this.manualRow.hidden;
    this.manualRow.hidden = shown !== "manual";
    this.refreshManual();
    if (wasHidden !== this.manualRow.hidden) this.layout();
  }

  refreshManual() {
    const p = this.active;
    if (!p || !p.img || !p.win || this.manualRow.hidden) return;
    const h = p.img.header;
    const step = h.manual_step || 1;
    for (const [box, value] of [[this.centerInput, p.win.center], [this.widthInput, p.win.width]]) {
      box.input.step = String(step);
      if (document.activeElement !== box.input && value !== null) {
        box.input.value = String(Math.round(value / step) * step === value ? value : +value.toFixed(3));
      }
    }
    this.widthInput.input.min = String(p.win.function === "LINEAR" ? 1 : 0);
    this.rangeText.textContent = `Pixel range ${fmtNumber(h.pixel_min)} to ${fmtNumber(h.pixel_max)}` +
      ` (${h.bits_stored}-bit${h.hounsfield ? ", HU" : ""}) · step ${fmtNumber(step)}`;
  }

  resetViews() {
    for (const p of this.panes) p.resetView();
  }

  // ----- input -----

  paneAt(target) {
    return this.panes.find((p) => p.root.contains(target)) || null;
  }

  bindEvents() {
    const box = this.panesBox;
    this.onWheel = (ev) => {
      const pane = this.paneAt(ev.target);
      if (!pane || !pane.img) return;
      ev.preventDefault(); // the page must not scroll under the film
      const r = pane.canvas.getBoundingClientRect();
      const unit = ev.deltaMode === 1 ? 16 : ev.deltaMode === 2 ? r.height : 1;
      if (pane.isVolume && !ev.ctrlKey) {
        // A volume: the wheel moves through the slices (Ctrl+wheel, a pinch, zooms).
        if (this.active !== pane) {
          this.active = pane;
          this.refreshToolbar();
        }
        pane.wheel(ev, unit);
        return;
      }
      // Pinch on a trackpad arrives as a wheel event with ctrlKey and small deltas.
      const k = ev.ctrlKey ? 0.01 : 0.0015;
      pane.zoomAt(ev.clientX - r.left, ev.clientY - r.top, Math.exp(-ev.deltaY * unit * k));
    };
    box.addEventListener("wheel", this.onWheel, { passive: false });
    box.addEventListener("contextmenu", (ev) => ev.preventDefault());
    box.addEventListener("dblclick", (ev) => {
      const pane = this.paneAt(ev.target);
      if (pane) pane.resetView();
    });
    box.addEventListener("pointerdown", (ev) => this.pointerDown(ev));
    box.addEventListener("pointermove", (ev) => this.pointerMove(ev));
    box.addEventListener("pointerup", (ev) => this.pointerUp(ev));
    box.addEventListener("pointercancel", (ev) => this.pointerUp(ev));
    box.addEventListener("pointerleave", () => {
      for (const p of this.panes) if (p.isVolume) p.leave();
    });
    this.root.addEventListener("keydown", (ev) => this.keyDown(ev));
    this.onFocusViewer = () => this.root.focus({ preventScroll: true });
    window.addEventListener(FOCUS_VIEWER, this.onFocusViewer);
    this.onResize = () => this.layout();
    window.addEventListener("resize", this.onResize);
    this.onFullscreen = () => {
      const fs = document.fullscreenElement;
      const on = Boolean(fs && fs.contains(this.root));
      this.fullBtn.classList.toggle("rcv-on", on);
      this.panelBtn.hidden = !(on && this.splitRow());
      this.root.dataset.fullscreen = String(on);
      if (this.splitRow()) this.applySplit(this.currentSplit());
      this.layout();
    };
    document.addEventListener("fullscreenchange", this.onFullscreen);
    if (window.ResizeObserver) {
      // The column's width changes with the sidebar and the window.
      this.observer = new ResizeObserver(() => this.layout());
      this.observer.observe(this.root);
    }
  }

  pointerDown(ev) {
    const pane = this.paneAt(ev.target);
    if (!pane) return;
    if (pane.isVolume && pane.bar.contains(ev.target)) {
      // The plane buttons and the slider take their own clicks and drags.
      if (this.active !== pane) {
        this.active = pane;
        this.refreshToolbar();
      }
      return;
    }
    this.root.focus({ preventScroll: true });
    if (this.active !== pane) {
      this.active = pane;
      this.refreshToolbar();
    }
    this.pointers.set(ev.pointerId, { x: ev.clientX, y: ev.clientY });
    if (this.pointers.size === 2) {
      // Two fingers: pinch zoom (and pan by the midpoint) replaces any one-finger drag.
      this.drag = { kind: "pinch", pane, ...this.pinchState() };
      return;
    }
    const wl = ev.button === 2 || (ev.button === 0 && (ev.shiftKey || this.dragMode === "wl"));
    if (ev.button !== 0 && ev.button !== 2) return;
    ev.preventDefault();
    pane.canvas.setPointerCapture(ev.pointerId);
    this.drag = { kind: wl ? "wl" : "pan", pane, x: ev.clientX, y: ev.clientY, id: ev.pointerId,
      x0: ev.clientX, y0: ev.clientY };
  }

  pinchState() {
    const [a, b] = [...this.pointers.values()];
    return {
      dist: Math.hypot(a.x - b.x, a.y - b.y) || 1,
      mx: (a.x + b.x) / 2,
      my: (a.y + b.y) / 2,
    };
  }

  pointerMove(ev) {
    if (this.pointers.has(ev.pointerId)) this.pointers.set(ev.pointerId, { x: ev.clientX, y: ev.clientY });
    const over = this.paneAt(ev.target);
    if (over && over.isVolume) {
      const r = over.canvas.getBoundingClientRect();
      over.hoverAt(ev.clientX - r.left, ev.clientY - r.top);
    }
    const d = this.drag;
    if (!d) return;
    if (d.kind === "pinch") {
      if (this.pointers.size < 2) return;
      const now = this.pinchState();
      const r = d.pane.canvas.getBoundingClientRect();
      d.pane.zoomAt(now.mx - r.left, now.my - r.top, now.dist / d.dist);
      d.pane.pan(now.mx - d.mx, now.my - d.my);
      Object.assign(d, now);
      return;
    }
    if (ev.pointerId !== d.id) return;
    const dx = ev.clientX - d.x;
    const dy = ev.clientY - d.y;
    d.x = ev.clientX;
    d.y = ev.clientY;
    if (d.kind === "pan") {
      d.pane.pan(dx, dy);
      return;
    }
    if (!d.pane.img) return;
    const targets = this.sync ? this.panes : d.pane.link ? d.pane.link.panes : [d.pane];
    for (const p of targets) {
      if (!p.img) continue;
      // Synchronised films of the same kind change by the same values; others (a DICOM
      // beside a PNG) by the same fraction of their own range.
      const k = p === d.pane || p.comparable(d.pane) ? d.pane.dragStep() : p.dragStep();
      p.dragWindow(dx, dy, k);
      p.scheduleWindow(ev);
    }
    this.preset = "manual";
    this.refreshToolbar();
  }

  pointerUp(ev) {
    this.pointers.delete(ev.pointerId);
    const d = this.drag;
    if (d && d.kind === "pan" && d.id === ev.pointerId && d.pane.link &&
        Math.hypot(ev.clientX - d.x0, ev.clientY - d.y0) < 4) {
      // A click (not a drag) on one of three linked planes.
      const r = d.pane.canvas.getBoundingClientRect();
      d.pane.clickAt(ev.clientX - r.left, ev.clientY - r.top);
    }
    if (this.drag && (this.drag.id === ev.pointerId || this.drag.kind === "pinch")) {
      this.drag = null;
    }
  }

  keyDown(ev) {
    // Only the viewer's own keys, without modifiers; everything else (N, P, Ctrl+Enter)
    // reaches the page's shortcuts.
    if (ev.ctrlKey || ev.metaKey || ev.altKey) return;
    if (ev.target && ev.target.tagName === "INPUT") return;
    const pane = this.active;
    if (ev.key === "v" || ev.key === "V") {
      // To the count grid (and back with V there): no Tab through the toolbar.
      ev.preventDefault();
      window.dispatchEvent(new CustomEvent(FOCUS_GRID));
    } else if (ev.key === "0") {
      ev.preventDefault();
      this.resetViews();
    } else if ((ev.key === "h" || ev.key === "H") && !this.panelBtn.hidden) {
      ev.preventDefault();
      this.togglePanel();
    } else if (ev.key === "1" && pane && pane.img) {
      ev.preventDefault();
      pane.actualSize();
    } else if (ev.key === "i" || ev.key === "I") {
      ev.preventDefault();
      this.invertBtn.click();
    } else if (pane && pane.img && (ev.key === "+" || ev.key === "=" || ev.key === "-")) {
      ev.preventDefault();
      pane.zoomAt(pane.cssW / 2, pane.cssH / 2, ev.key === "-" ? 1 / 1.25 : 1.25);
    } else if (pane && pane.isVolume && pane.img && VOLUME_KEYS[ev.key]) {
      ev.preventDefault(); // through the slices, not the page
      if (ev.key === "Home") pane.go(0, ev);
      else if (ev.key === "End") pane.go(pane.count() - 1, ev);
      else {
        const page = Math.max(1, Math.round(pane.count() / 10));
        pane.step({ ArrowUp: -1, ArrowDown: 1, PageUp: -page, PageDown: page }[ev.key], ev);
      }
    } else if (pane && pane.img && ev.key.startsWith("Arrow")) {
      ev.preventDefault(); // pan the film, not the page
      const step = 40;
      const [dx, dy] = { ArrowLeft: [step, 0], ArrowRight: [-step, 0], ArrowUp: [0, step],
        ArrowDown: [0, -step] }[ev.key];
      pane.pan(dx, dy);
    }
  }

  destroy() {
    this.destroyed = true;
    for (const p of this.panes) p.destroy();
    window.removeEventListener("resize", this.onResize);
    window.removeEventListener(FOCUS_VIEWER, this.onFocusViewer);
    document.removeEventListener("fullscreenchange", this.onFullscreen);
    if (this.observer) this.observer.disconnect();
    this.root.remove();
  }
}

export default function (component) {
  const { data, parentElement } = component;
  let viewer = VIEWERS.get(parentElement);
  if (!viewer || viewer.destroyed) {
    viewer = new Viewer(parentElement);
    VIEWERS.set(parentElement, viewer);
  }
  viewer.update(data);
  return () => {
    viewer.destroy();
    VIEWERS.delete(parentElement);
  };
}
