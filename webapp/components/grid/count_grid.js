// RadConcord count grid: six ReXVal error categories x clinically significant/insignificant.
//
// Every change is saved by the grid itself through POST <data.url> (webapp/api/rating.py),
// not through a Streamlit rerun, so a click is stored even when the Streamlit session behind
// the page has gone, and the grid knows at once when it was not:
//
//   200 {version, counts, saved_at}  -> "Saved hh:mm:ss"
//   409 {version, counts}            -> another window changed the pair: show the stored
//                                       counts and "changed in another window, reloaded"
//   401                              -> the session ended: the cell shows "Not saved"; the
//                                       change is kept in localStorage and sent again on the
//                                       next mount of a grid (after the rater logs in again)
//   503 / network error              -> "Not saved", retried with backoff
//
// One save is in flight at a time; changes made meanwhile are sent next, with the version
// the previous save returned. localStorage holds only the unsaved counts and the version
// they were based on, under the pair's id and an opaque tag of the rater's assignment
// (webapp/api/rating.py grid_tag): never a name, a report text or anything else.
//
// Mark done (the page's button, or Ctrl+Enter) waits for the grid: a click while a save is
// in flight or pending is held until every change is stored, then passed on; if a change
// cannot be stored the pair is not marked done and the grid says why.
//
// `Saver` (the saving rules) touches no DOM: tests/unit/test_count_grid_js.py runs it in
// node against a scripted server. `Grid` draws the cells and the keyboard around it.

export const STORE_PREFIX = "radconcord.grid.unsaved:";
const DONE_SELECTORS = [".st-key-confirm_zero_yes button", ".st-key-done button"];
// The page's Next / Previous buttons (their N / P shortcuts), by key.
const NAV_KEYS = {
  n: ".st-key-next button", N: ".st-key-next button",
  p: ".st-key-prev button", P: ".st-key-prev button",
};
export const RETRY_FIRST_MS = 1000;
export const RETRY_MAX_MS = 30000;
const MAX_COUNT = 99;
const MESSAGE_KINDS = ["stale", "busy", "login", "error"];
// The window event of webapp/state.py SESSION_EVENT.
export const SESSION_EVENT = "radconcord:session";
// Key V moves the focus between the film viewer and the grid (viewer.js sends FOCUS_GRID,
// the grid sends FOCUS_VIEWER): no Tab through the viewer's toolbar.
export const FOCUS_GRID = "radconcord:focus-grid";
export const FOCUS_VIEWER = "radconcord:focus-viewer";
// Where a new pair's grid may take the focus from: nothing, a button (Mark done, Next), the
// film viewer, or the previous pair's grid. Never from a text field (a flag note, the
// records panel) the rater is typing in.
// The focus is on nothing that takes keys: the page, or a plain block the rater clicked (a
// report, say; Streamlit's containers may carry a tabindex).
export function focusIsNowhere(active) {
  if (!active || active === document.body || active === document.documentElement) return true;
  if (["INPUT", "TEXTAREA", "SELECT", "BUTTON", "A", "IFRAME"].includes(active.tagName)) {
    return false;
  }
  if (active.isContentEditable || active.shadowRoot) return false;
  if (active.classList && (active.classList.contains("rcv-root")
      || active.classList.contains("rc-er-box"))) return false;
  const role = active.getAttribute && active.getAttribute("role");
  return !role || ["main", "region", "group", "presentation", "none"].includes(role);
}

export function mayTakeFocus(active) {
  if (focusIsNowhere(active)) return true;
  if (!active || active === document.body || active === document.documentElement) return true;
  if (active.tagName === "BUTTON") return true;
  if (active.classList && active.classList.contains("rcv-root")) return true;
  // Another grid (a shadow host whose root holds .rc-grid): the previous pair's.
  return Boolean(active.shadowRoot && active.shadowRoot.querySelector(".rc-grid"));
}

const instances = new WeakMap();

export function storeKey(pair, tag) {
  return `${STORE_PREFIX}${pair}:${tag}`;
}

// The browser's localStorage, or nothing when it is disabled (private mode, a full quota):
// then a change is still on screen and in memory, only not kept across a reload.
function browserStorage() {
  try {
    return window.localStorage;
  } catch (err) {
    return null;
  }
}

export function readStore(storage, key) {
  try {
    const raw = storage ? storage.getItem(key) : null;
    if (!raw) return null;
    const entry = JSON.parse(raw);
    if (!entry || typeof entry.version !== "number" || typeof entry.cells !== "object") {
      return null;
    }
    return entry;
  } catch (err) {
    return null; // a damaged entry: nothing to resend
  }
}

// Only the unsaved counts and the version they were based on: nothing else is ever stored.
export function writeStore(storage, key, cells, version) {
  try {
    if (!storage) return;
    if (Object.keys(cells).length === 0) storage.removeItem(key);
    else storage.setItem(key, JSON.stringify({ cells, version }));
  } catch (err) {
    // A full quota: the change is still on screen and in memory.
  }
}

// A refused save (409) whose cells all hold the values sent was stored after all: the
// answer to an earlier try was lost (a page left mid-save, a network cut).
export function alreadyStored(cells, counts) {
  return Object.entries(cells).every(([key, value]) => counts && counts[key] === value);
}

export function clock(iso) {
  const at = iso ? new Date(iso) : new Date();
  const pad = (n) => String(n).padStart(2, "0");
  return `${pad(at.getHours())}:${pad(at.getMinutes())}:${pad(at.getSeconds())}`;
}

// POST a JSON body; resolves {status, body}. A network failure (server down or restarting)
// is status 0.
export async function postJson(url, body) {
  let response;
  try {
    response = await fetch(url, {
      method: "POST",
      credentials: "same-origin",
      cache: "no-store",
      headers: { "Content-Type": "application/json", "X-RadConcord": "1" },
      body: JSON.stringify(body),
    });
  } catch (err) {
    return { status: 0, body: {} };
  }
  let parsed = {};
  try {
    parsed = await response.json();
  } catch (err) {
    parsed = {};
  }
  return { status: response.status, body: parsed };
}

// Changes kept from earlier pages (a save refused with 401, a server that was down) are sent
// again when any grid mounts. Each is sent with its own tag: the server refuses one that
// another account made on this browser ("not_yours"), which then stays for that account.
// Resolves to the number of kept changes that another window's changes replaced.
export async function resendKept(url, skipKey,
                                 { post = postJson, storage = browserStorage() } = {}) {
  const keys = [];
  try {
    for (let i = 0; storage && i < storage.length; i += 1) {
      const key = storage.key(i);
      if (key && key.startsWith(STORE_PREFIX) && key !== skipKey) keys.push(key);
    }
  } catch (err) {
    return 0;
  }
  let stale = 0;
  for (const key of keys) {
    const entry = readStore(storage, key);
    const rest = key.slice(STORE_PREFIX.length);
    const cut = rest.lastIndexOf(":");
    if (!entry || cut <= 0) continue;
    const pair = rest.slice(0, cut);
    const tag = rest.slice(cut + 1);
    const { status, body } = await post(url, {
      pair, tag, version: entry.version, cells: entry.cells,
    });
    const reason = body && body.reason;
    if (status === 409 && !alreadyStored(entry.cells, body.counts)) stale += 1;
    const keep = status === 0 || status === 401 || status >= 500 || reason === "not_yours";
    if (!keep) writeStore(storage, key, {}, 0);
  }
  return stale;
}

// The saving rules of one pair's grid: one save in flight at a time, each carrying the
// version its counts are based on; what the server answers decides what is shown.
export class Saver {
  constructor({ pair, tag, url, version, counts, readOnly = false, post = postJson,
                storage = browserStorage(), onChange = () => {},
                setTimer = (fn, ms) => setTimeout(fn, ms), clearTimer = (t) => clearTimeout(t),
                now = () => Date.now() }) {
    Object.assign(this, { pair, tag, url, post, storage, onChange, setTimer, clearTimer, now });
    this.key = storeKey(pair, tag);
    this.version = version;
    this.stored = { ...counts };
    this.readOnly = Boolean(readOnly);
    this.pending = {};
    this.inflight = null;
    this.blocked = null; // "login": no further tries until the next mount
    this.status = { kind: "idle", text: "" };
    this.retryTimer = null;
    this.retryDelay = RETRY_FIRST_MS;
    this.waiters = [];
    this.lastSaveMs = null;
  }

  // A change kept in this browser before the session ended (or the server went down) is
  // shown at once and sent with the version it was based on; a pair changed since in
  // another window refuses it (409) and the stored counts are shown.
  restoreKept() {
    const kept = readStore(this.storage, this.key);
    if (!kept || this.readOnly) return false;
    this.version = kept.version;
    this.pending = { ...kept.cells };
    this.setStatus("saving", "Saving the change kept from before…");
    this.flush();
    return true;
  }

  // A rerun of the page brings what the server stores. It can be older than what this grid
  // has already saved (the rerun started before the save): only move forward, and never
  // over changes that are not stored yet.
  adopt(version, counts, readOnly) {
    this.readOnly = Boolean(readOnly);
    if (version > this.version && this.clean()) {
      this.version = version;
      this.stored = { ...counts };
    }
    this.onChange();
  }

  value(key) {
    if (key in this.pending) return this.pending[key];
    if (this.inflight && key in this.inflight) return this.inflight[key];
    return Number(this.stored[key] || 0);
  }

  pendingCount() {
    return Object.keys(this.pending).length;
  }

  unsavedKeys() {
    return new Set([...Object.keys(this.pending), ...Object.keys(this.inflight || {})]);
  }

  clean() {
    return !this.inflight && this.pendingCount() === 0;
  }

  // A cell is "Not saved" while its change is unsaved and the last try failed.
  notSaved(key) {
    return ["login", "busy", "error"].includes(this.status.kind) && this.unsavedKeys().has(key);
  }

  setStatus(kind, text) {
    this.status = { kind, text };
    this.onChange();
  }

  persist() {
    writeStore(this.storage, this.key, { ...(this.inflight || {}), ...this.pending },
      this.version);
  }

  change(key, value) {
    if (this.readOnly) return;
    const next = Math.max(0, Math.min(MAX_COUNT, Math.trunc(value)));
    if (!Number.isFinite(next) || next === this.value(key)) {
      this.onChange();
      return;
    }
    this.pending[key] = next;
    this.persist();
    this.onChange();
    // Still logged out: kept here and in this browser, marked Not saved, sent after login.
    if (this.blocked !== "login") this.flush();
  }

  flush() {
    if (this.inflight) return;
    if (this.pendingCount() === 0 || this.blocked || this.readOnly) {
      this.settleWaiters();
      return;
    }
    if (this.retryTimer) {
      this.clearTimer(this.retryTimer);
      this.retryTimer = null;
    }
    this.inflight = this.pending;
    this.pending = {};
    this.persist();
    if (this.status.kind !== "busy" && this.status.kind !== "stale") {
      this.setStatus("saving", "Saving…");
    }
    const sentAt = this.now();
    const body = { pair: this.pair, version: this.version, cells: this.inflight, tag: this.tag };
    return this.post(this.url, body).then(({ status, body: answer }) => {
      this.lastSaveMs = this.now() - sentAt;
      this.answer(status, answer || {});
    });
  }

  answer(status, body) {
    const sent = this.inflight || {};
    this.inflight = null;
    if (status === 200 || (status === 409 && alreadyStored(sent, body.counts))) {
      this.version = body.version;
      this.stored = { ...body.counts };
      this.retryDelay = RETRY_FIRST_MS;
      this.persist();
      this.setStatus("saved", `Saved ${clock(status === 200 ? body.saved_at : null)}`);
      if (this.pendingCount() > 0) this.flush();
      else this.settleWaiters();
      return;
    }
    if (status === 409) {
      // Another window changed the pair: what it stored wins; this grid's unsaved changes
      // were based on an older view and are dropped, with a visible message.
      this.version = body.version;
      this.stored = { ...body.counts };
      this.pending = {};
      this.persist();
      this.setStatus("stale", body.message || "Not saved: changed in another window, reloaded");
      this.settleWaiters();
      return;
    }
    if (status === 401 || status === 0 || status >= 500) {
      this.pending = { ...sent, ...this.pending };
      this.persist();
      if (status === 401) {
        this.blocked = "login";
        this.setStatus("login", body.message || "Not saved: your session has ended. Log in "
          + "again; your change is kept in this browser and saved then.");
      } else {
        const wait = this.retryDelay;
        this.retryDelay = Math.min(RETRY_MAX_MS, this.retryDelay * 2);
        const again = `sent again in ${Math.round(wait / 1000)} s`;
        let text;
        if (status === 0) {
          text = `Not saved: the server cannot be reached; your change is kept and ${again}.`;
        } else if (body.reason === "storage") {
          // 507: the disk is full; the change waits in this browser like a busy save.
          text = "Not saved: the server's storage is full; your change is kept in this "
            + `browser and ${again}. Tell the study's administrator.`;
        } else {
          text = `${body.message || "Not saved: the server is busy; your change is kept"} `
            + `(${again}).`;
        }
        this.setStatus("busy", text);
        this.retryTimer = this.setTimer(() => {
          this.retryTimer = null;
          this.flush();
        }, wait);
      }
      this.settleWaiters();
      return;
    }
    // 400, 403 (closed study), 404: the change cannot be stored; say why, show the stored.
    this.pending = {};
    this.persist();
    if (body.reason === "read_only") this.readOnly = true;
    this.setStatus("error", body.message || `Not saved (error ${status}).`);
    this.settleWaiters();
  }

  // Resolves true once every change is stored; false when one cannot be stored now (the
  // session ended, the server is busy or down) or another window's counts replaced them.
  settle() {
    if (this.clean()) return Promise.resolve(true);
    return new Promise((resolve) => {
      this.waiters.push(resolve);
      if (!this.inflight) this.flush(); // a change waiting for a retry is sent at once
    });
  }

  settleWaiters() {
    if (this.inflight || this.waiters.length === 0) return;
    const ok = this.clean() && this.status.kind !== "stale";
    const waiters = this.waiters;
    this.waiters = [];
    for (const resolve of waiters) resolve(ok);
  }

  // A new session exists (the page's cookie script says so): a save that was blocked by a
  // 401 is tried again; nothing happens otherwise.
  retryAfterLogin() {
    if (this.blocked !== "login") return;
    this.blocked = null;
    this.flush();
  }

  destroy() {
    if (this.retryTimer) this.clearTimer(this.retryTimer);
    this.retryTimer = null;
  }
}

class Grid {
  constructor(parentElement, data) {
    this.parent = parentElement;
    this.passThrough = false;
    this.pair = data.pair;
    this.note = data.note || "";
    this.saver = new Saver({
      pair: data.pair, tag: data.tag, url: data.url, version: data.version,
      counts: data.counts, readOnly: data.read_only, onChange: () => this.render(),
    });
    this.build(data);
    this.render();
    this.saver.restoreKept();
    resendKept(data.url, this.saver.key).then((stale) => {
      if (stale > 0 && this.saver.status.kind !== "stale") {
        this.saver.setStatus("stale", "A change kept in this browser for another pair was "
          + "not applied: that pair was changed in another window meanwhile.");
      }
    });
    this.onDocumentClick = this.onDocumentClick.bind(this);
    this.onWindowKey = this.onWindowKey.bind(this);
    this.onSession = this.onSession.bind(this);
    document.addEventListener("click", this.onDocumentClick, true);
    window.addEventListener("keydown", this.onWindowKey, true);
    // Sent by the page's cookie script (webapp/state.py SESSION_EVENT) once a login has set
    // the new cookie: a kept change refused with 401 just before it is sent again.
    window.addEventListener(SESSION_EVENT, this.onSession);
    this.onFocusGrid = () => this.focusCell();
    window.addEventListener(FOCUS_GRID, this.onFocusGrid);
    this.lastCell = null;
    // A new pair: the first cell has the focus, so the rater types counts at once (no Tab).
    // Streamlit may still be drawing (the previous pair's grid is on screen until then):
    // try again a few times while the focus is nowhere in particular.
    if (!this.saver.readOnly) {
      for (const ms of [0, 60, 250, 600, 1200]) setTimeout(() => this.autoFocus(), ms);
    }
  }

  // The grid of the pair in the address bar (a stale grid of the previous pair is not).
  current() {
    if (!this.root || !this.root.isConnected) return false;
    const wanted = new URL(window.location.href).searchParams.get("pair");
    return !wanted || wanted === this.pair;
  }

  autoFocus() {
    if (this.autoFocused || !this.current() || this.saver.readOnly) return;
    const active = document.activeElement;
    if (this.parent.activeElement) {
      this.autoFocused = true; // the rater is in this grid already
      return;
    }
    if (!mayTakeFocus(active)) return;
    this.focusCell();
    if (this.parent.activeElement) this.autoFocused = true;
  }

  focusCell() {
    if (!this.current() || !this.inputs || !this.inputs.length) return;
    const input = this.lastCell || this.inputs[0][0];
    input.focus({ preventScroll: true });
  }

  onSession() {
    this.saver.retryAfterLogin();
  }

  update(data) {
    this.note = data.note || "";
    this.saver.adopt(data.version, data.counts, data.read_only);
  }

  // -- DOM -------------------------------------------------------------------------------

  build(data) {
    const root = document.createElement("div");
    root.className = "rc-grid";
    root.setAttribute("role", "group");
    root.setAttribute("aria-label", "Error counts");
    const table = document.createElement("div");
    table.className = "rc-table";
    // The short state ("Saved 10:42:07") sits in the corner above the category labels: the
    // grid needs no row of its own for it (at 1280x800 it shares the column height with
    // both reports). A message (not saved, reloaded) opens a line under the grid, where its
    // length moves no cell from under the pointer.
    const state = document.createElement("div");
    state.className = "rc-head rc-corner rc-state";
    table.appendChild(state);
    for (const col of data.columns) {
      const head = document.createElement("div");
      head.className = "rc-head";
      head.textContent = col.label;
      table.appendChild(head);
    }
    this.inputs = [];
    this.labels = [];
    this.cells = {};
    data.rows.forEach((row, r) => {
      const label = document.createElement("div");
      label.className = "rc-label";
      const num = document.createElement("span");
      num.className = "rc-num";
      num.textContent = `${row.category}.`;
      label.append(num, document.createTextNode(` ${row.label}`));
      table.appendChild(label);
      this.labels.push(label);
      this.inputs.push([]);
      data.columns.forEach((col, c) => {
        const key = `${row.category}${col.significant ? "s" : "i"}`;
        const name = `${row.label} (${col.label.toLowerCase()})`;
        const box = document.createElement("div");
        box.className = "rc-cell";
        box.dataset.cell = key;
        const minus = document.createElement("button");
        minus.type = "button";
        minus.className = "rc-step";
        minus.tabIndex = -1;
        minus.textContent = "−";
        minus.setAttribute("aria-label", `Decrease ${name}`);
        const input = document.createElement("input");
        input.type = "text";
        input.inputMode = "numeric";
        input.autocomplete = "off";
        input.maxLength = 2;
        input.className = "rc-input";
        input.setAttribute("role", "spinbutton");
        input.setAttribute("aria-label", name);
        input.setAttribute("aria-valuemin", "0");
        input.setAttribute("aria-valuemax", String(MAX_COUNT));
        input.dataset.cell = key;
        const plus = document.createElement("button");
        plus.type = "button";
        plus.className = "rc-step";
        plus.tabIndex = -1;
        plus.textContent = "+";
        plus.setAttribute("aria-label", `Increase ${name}`);
        const flag = document.createElement("span");
        flag.className = "rc-flag";
        box.append(minus, input, plus, flag);
        table.appendChild(box);
        this.inputs[r].push(input);
        this.cells[key] = { box, input, minus, plus, flag };
        // Keep the focus where it is: a click on +/- is not a move in the keyboard order.
        for (const step of [minus, plus]) {
          step.addEventListener("mousedown", (e) => e.preventDefault());
        }
        minus.addEventListener("click", () => this.saver.change(key, this.saver.value(key) - 1));
        plus.addEventListener("click", () => this.saver.change(key, this.saver.value(key) + 1));
        input.addEventListener("focus", () => {
          this.lastCell = input;
          input.select();
          this.labels.forEach((l, i) => l.classList.toggle("rc-active", i === r));
        });
        input.addEventListener("keydown", (e) => this.onCellKey(e, key, r, c));
        input.addEventListener("input", () => this.onCellInput(key, input));
        input.addEventListener("blur", () => {
          if (input.value.trim() === "") input.value = String(this.saver.value(key));
          this.labels[r].classList.remove("rc-active");
        });
      });
    });
    const status = document.createElement("div");
    status.className = "rc-status";
    status.setAttribute("role", "status");
    status.setAttribute("aria-live", "polite");
    const text = document.createElement("span");
    text.className = "rc-status-text";
    const login = document.createElement("button");
    login.type = "button";
    login.className = "rc-login";
    login.textContent = "Log in again";
    login.addEventListener("click", () => window.location.reload());
    status.append(text, login);
    root.append(table, status);
    this.stateBox = state;
    this.parent.appendChild(root);
    this.root = root;
    this.statusBox = status;
    this.statusText = text;
  }

  render() {
    if (!this.root) return;
    const saver = this.saver;
    this.root.classList.toggle("rc-readonly", saver.readOnly);
    for (const [key, cell] of Object.entries(this.cells)) {
      const value = saver.value(key);
      const text = String(value);
      // A cell the rater has just emptied to type a new number stays empty while focused.
      const typing = this.focused() === cell.input && cell.input.value === "";
      if (cell.input.value !== text && !typing) cell.input.value = text;
      cell.input.setAttribute("aria-valuenow", text);
      cell.input.readOnly = saver.readOnly;
      cell.minus.disabled = saver.readOnly || value <= 0;
      cell.plus.disabled = saver.readOnly || value >= MAX_COUNT;
      const notSaved = saver.notSaved(key);
      cell.box.classList.toggle("rc-unsaved", notSaved);
      cell.flag.textContent = notSaved ? "Not saved" : "";
      cell.box.classList.toggle("rc-nonzero", value > 0);
      cell.input.setAttribute("aria-invalid", notSaved ? "true" : "false");
    }
    const { kind, text } = saver.status;
    this.statusBox.dataset.kind = kind;
    this.statusText.textContent = MESSAGE_KINDS.includes(kind) ? text : "";
    this.stateBox.dataset.kind = kind;
    // Until the first save, the page's short note (how saving works, the done-state).
    this.stateBox.textContent = {
      idle: this.note, saving: "Saving…", saved: text,
      // The corner is always on screen, the line under the grid not always (1280x800, long
      // reports): the refusal says why in the corner too.
      stale: "Changed in another window: reloaded", busy: "Not saved",
      login: "Not saved: log in again", error: "Not saved",
    }[kind];
    this.root.dataset.pair = this.pair;
    this.root.dataset.version = String(saver.version);
    this.root.dataset.state = kind;
    if (saver.lastSaveMs !== null) this.root.dataset.lastSaveMs = saver.lastSaveMs.toFixed(1);
  }

  focused() {
    // Inside a shadow root the document only sees the host as focused.
    return this.parent.activeElement || document.activeElement;
  }

  // -- keyboard --------------------------------------------------------------------------

  onCellKey(event, key, r, c) {
    const move = (dr, dc) => {
      const rows = this.inputs.length;
      const cols = this.inputs[0].length;
      const nr = Math.max(0, Math.min(rows - 1, r + dr));
      const nc = Math.max(0, Math.min(cols - 1, c + dc));
      this.inputs[nr][nc].focus();
    };
    if (event.ctrlKey || event.metaKey || event.altKey) return; // Ctrl+Enter: window handler
    const saver = this.saver;
    if (event.key === "v" || event.key === "V") {
      // To the film viewer (V there comes back here).
      event.preventDefault();
      window.dispatchEvent(new CustomEvent(FOCUS_VIEWER));
      return;
    }
    const nav = NAV_KEYS[event.key];
    if (nav) {
      // The page's N / P shortcuts do not fire while a cell has the focus, and a new pair's
      // first cell always has it: the grid passes them on, once its counts are stored.
      event.preventDefault();
      this.navigate(nav);
      return;
    }
    switch (event.key) {
      case "ArrowUp": event.preventDefault(); move(-1, 0); return;
      case "ArrowDown": event.preventDefault(); move(1, 0); return;
      case "ArrowLeft": event.preventDefault(); move(0, -1); return;
      case "ArrowRight": event.preventDefault(); move(0, 1); return;
      case "+": case "=":
        event.preventDefault(); saver.change(key, saver.value(key) + 1); event.target.select();
        return;
      case "-": case "_":
        event.preventDefault(); saver.change(key, saver.value(key) - 1); event.target.select();
        return;
      default:
        break;
    }
    // Digits edit the cell (the input event saves); other characters are not counts.
    if (event.key.length === 1 && !/[0-9]/.test(event.key)) event.preventDefault();
  }

  onCellInput(key, input) {
    const raw = input.value.replace(/[^0-9]/g, "");
    if (raw !== input.value) input.value = raw;
    if (raw === "") return; // emptied while typing: nothing to store yet
    this.saver.change(key, Number(raw));
  }

  // -- Mark done -------------------------------------------------------------------------

  doneButton() {
    for (const selector of DONE_SELECTORS) {
      const button = document.querySelector(selector);
      if (button) return button;
    }
    return null;
  }

  /** Click the page's Next or Previous button (``selector``) once the counts are saved. */
  navigate(selector) {
    this.saver.settle().then((ok) => {
      if (!ok) return; // the status line already says why the counts are not saved
      const button = document.querySelector(selector);
      if (button && !button.disabled) button.click();
    });
  }

  markDone() {
    const saver = this.saver;
    saver.settle().then((ok) => {
      if (!ok) {
        const note = "The pair is not marked done until your counts are saved.";
        const { kind, text } = saver.status;
        if (kind !== "stale" && !text.includes(note)) saver.setStatus(kind, `${text} ${note}`);
        return;
      }
      const button = this.doneButton();
      if (!button || button.disabled) return;
      this.passThrough = true;
      try {
        button.click();
      } finally {
        this.passThrough = false;
      }
    });
  }

  onDocumentClick(event) {
    if (this.passThrough || !this.root || !this.root.isConnected) return;
    const target = event.target;
    const button = target && target.closest ? target.closest(DONE_SELECTORS.join(",")) : null;
    if (!button || this.saver.clean()) return;
    // A save is in flight or waiting: hold the click until it is stored.
    event.preventDefault();
    event.stopImmediatePropagation();
    this.markDone();
  }

  onWindowKey(event) {
    if (!this.root || !this.root.isConnected) return;
    if (!(event.ctrlKey || event.metaKey || event.altKey)) {
      this.keyWithoutFocus(event);
      return;
    }
    if (event.key !== "Enter" || !(event.ctrlKey || event.metaKey)) return;
    // The page's own Ctrl+Enter shortcut would not wait for a save in flight (and does not
    // fire while a grid cell has the focus): the grid handles the key everywhere.
    event.preventDefault();
    event.stopImmediatePropagation();
    this.markDone();
  }

  // The focus is nowhere (the rater clicked a report, say): a digit, +/- or an arrow goes to
  // the grid's last cell (the first on a new pair) as if it had the focus.
  keyWithoutFocus(event) {
    if (!focusIsNowhere(document.activeElement)) return;
    if (this.saver.readOnly || !this.current() || !this.inputs) return;
    const digit = /^[0-9]$/.test(event.key);
    const other = ["+", "=", "-", "_", "ArrowUp", "ArrowDown", "ArrowLeft", "ArrowRight"];
    if (!digit && !other.includes(event.key)) return;
    event.preventDefault();
    event.stopImmediatePropagation();
    this.focusCell();
    const input = this.lastCell || this.inputs[0][0];
    const key = input.dataset.cell;
    if (digit) {
      this.saver.change(key, Number(event.key));
      const end = input.value.length;
      input.setSelectionRange(end, end); // a second digit makes "12"
    } else if (event.key.startsWith("Arrow")) {
      // Moving from the cell the rater last left: the focus is enough.
    } else {
      const up = event.key === "+" || event.key === "=";
      this.saver.change(key, this.saver.value(key) + (up ? 1 : -1));
      input.select();
    }
  }

  destroy() {
    window.removeEventListener(FOCUS_GRID, this.onFocusGrid);
    document.removeEventListener("click", this.onDocumentClick, true);
    window.removeEventListener("keydown", this.onWindowKey, true);
    window.removeEventListener(SESSION_EVENT, this.onSession);
    this.saver.destroy();
  }
}

export default function countGrid(component) {
  const { data, parentElement } = component;
  let grid = instances.get(parentElement);
  if (grid && grid.pair !== data.pair) {
    // Not expected (a new pair mounts a new grid under its own key), but never mix pairs.
    grid.destroy();
    grid.root.remove();
    grid = null;
  }
  if (!grid) {
    grid = new Grid(parentElement, data);
    instances.set(parentElement, grid);
  } else {
    grid.update(data);
  }
  // Streamlit calls this function again with each new `data`, and may call a returned
  // cleanup when a newer call overtakes it; tear down only once the grid has left the page.
  return () => {
    setTimeout(() => {
      const host = parentElement.host;
      if (!parentElement.isConnected && !(host && host.isConnected)) {
        grid.destroy();
        instances.delete(parentElement);
      }
    }, 0);
  };
}
