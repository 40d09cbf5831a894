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

const STORE_PREFIX = "radconcord.grid.unsaved:";
const DONE_SELECTORS = [".st-key-confirm_zero_yes button", ".st-key-done button"];
const RETRY_FIRST_MS = 1000;
const RETRY_MAX_MS = 30000;
const MAX_COUNT = 99;

const instances = new WeakMap();

function storeKey(pair, tag) {
  return `${STORE_PREFIX}${pair}:${tag}`;
}

function readStore(key) {
  try {
    const raw = window.localStorage.getItem(key);
    if (!raw) return null;
    const entry = JSON.parse(raw);
    if (!entry || typeof entry.version !== "number" || typeof entry.cells !== "object") {
      return null;
    }
    return entry;
  } catch (err) {
    return null; // storage disabled or a damaged entry: nothing to resend
  }
}

function writeStore(key, cells, version) {
  try {
    if (Object.keys(cells).length === 0) {
      window.localStorage.removeItem(key);
    } else {
      window.localStorage.setItem(key, JSON.stringify({ cells, version }));
    }
  } catch (err) {
    // Private mode or a full quota: the change is still on screen and in memory.
  }
}

// A refused save (409) whose cells all hold the values sent was stored after all: the
// answer to an earlier try was lost (a page left mid-save, a network cut).
function alreadyStored(cells, counts) {
  return Object.entries(cells).every(([key, value]) => counts && counts[key] === value);
}

function clock(iso) {
  const at = iso ? new Date(iso) : new Date();
  const pad = (n) => String(n).padStart(2, "0");
  return `${pad(at.getHours())}:${pad(at.getMinutes())}:${pad(at.getSeconds())}`;
}

async function post(url, body) {
  // Returns {status, body}; a network failure (server down or restarting) is status 0.
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
async function resendKept(url, skipKey) {
  let keys = [];
  try {
    for (let i = 0; i < window.localStorage.length; i += 1) {
      const key = window.localStorage.key(i);
      if (key && key.startsWith(STORE_PREFIX) && key !== skipKey) keys.push(key);
    }
  } catch (err) {
    keys = [];
  }
  let stale = 0;
  for (const key of keys) {
    const entry = readStore(key);
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
    if (!keep) writeStore(key, {}, 0);
  }
  return stale;
}

class Grid {
  constructor(parentElement) {
    this.parent = parentElement;
    this.root = null;
    this.pair = null;
    this.waiters = [];
    this.passThrough = false;
    this.retryTimer = null;
    this.retryDelay = RETRY_FIRST_MS;
    this.onDocumentClick = this.onDocumentClick.bind(this);
    this.onWindowKey = this.onWindowKey.bind(this);
    document.addEventListener("click", this.onDocumentClick, true);
    window.addEventListener("keydown", this.onWindowKey, true);
  }

  // -- data from Python ------------------------------------------------------------------

  update(data) {
    if (this.pair !== data.pair) {
      this.start(data);
      return;
    }
    this.readOnly = Boolean(data.read_only);
    this.note = data.note || "";
    // A rerun of the page brings what the server stores. It can be older than what this
    // grid has already saved (the rerun started before the save): only move forward, and
    // never over changes that are not stored yet.
    if (data.version > this.version && !this.inflight && this.pendingCount() === 0) {
      this.version = data.version;
      this.stored = { ...data.counts };
    }
    this.render();
  }

  start(data) {
    this.pair = data.pair;
    this.tag = data.tag;
    this.url = data.url;
    this.key = storeKey(data.pair, data.tag);
    this.rows = data.rows;
    this.columns = data.columns;
    this.readOnly = Boolean(data.read_only);
    this.note = data.note || "";
    this.version = data.version;
    this.stored = { ...data.counts };
    this.pending = {};
    this.inflight = null;
    this.blocked = null; // "login": no further tries until the next mount
    this.status = { kind: "idle", text: "" };
    this.lastSaveMs = null;
    this.build();
    const kept = readStore(this.key);
    if (kept && !this.readOnly) {
      // A change this rater made before the session ended (or the server went down):
      // shown at once and sent with the version it was based on; a pair changed since in
      // another window refuses it (409) and the stored counts are shown.
      this.version = kept.version;
      this.pending = { ...kept.cells };
      this.status = { kind: "saving", text: "Saving the change kept from before…" };
    }
    this.render();
    if (this.pendingCount() > 0) this.flush();
    resendKept(this.url, this.key).then((stale) => {
      if (stale > 0 && this.status.kind !== "stale") {
        this.setStatus("stale", "A change kept in this browser for another pair was not "
          + "applied: that pair was changed in another window meanwhile.");
      }
    });
  }

  // -- DOM -------------------------------------------------------------------------------

  build() {
    if (this.root) this.root.remove();
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
    for (const col of this.columns) {
      const head = document.createElement("div");
      head.className = "rc-head";
      head.textContent = col.label;
      table.appendChild(head);
    }
    this.inputs = [];
    this.labels = [];
    this.cells = {};
    this.rows.forEach((row, r) => {
      const label = document.createElement("div");
      label.className = "rc-label";
      const num = document.createElement("span");
      num.className = "rc-num";
      num.textContent = `${row.category}.`;
      label.append(num, document.createTextNode(` ${row.label}`));
      table.appendChild(label);
      this.labels.push(label);
      this.inputs.push([]);
      this.columns.forEach((col, c) => {
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
        minus.addEventListener("click", () => this.change(key, this.value(key) - 1));
        plus.addEventListener("click", () => this.change(key, this.value(key) + 1));
        input.addEventListener("focus", () => {
          input.select();
          this.labels.forEach((l, i) => l.classList.toggle("rc-active", i === r));
        });
        input.addEventListener("keydown", (e) => this.onCellKey(e, key, r, c));
        input.addEventListener("input", () => this.onCellInput(key, input));
        input.addEventListener("blur", () => {
          if (input.value.trim() === "") input.value = String(this.value(key));
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
    const unsaved = this.unsavedKeys();
    const failing = ["login", "busy", "error"].includes(this.status.kind);
    this.root.classList.toggle("rc-readonly", this.readOnly);
    for (const [key, cell] of Object.entries(this.cells)) {
      const value = this.value(key);
      const text = String(value);
      // A cell the rater has just emptied to type a new number stays empty while focused.
      const typing = this.focused() === cell.input && cell.input.value === "";
      if (cell.input.value !== text && !typing) cell.input.value = text;
      cell.input.setAttribute("aria-valuenow", text);
      cell.input.readOnly = this.readOnly;
      cell.minus.disabled = this.readOnly || value <= 0;
      cell.plus.disabled = this.readOnly || value >= MAX_COUNT;
      const notSaved = failing && unsaved.has(key);
      cell.box.classList.toggle("rc-unsaved", notSaved);
      cell.flag.textContent = notSaved ? "Not saved" : "";
      cell.box.classList.toggle("rc-nonzero", value > 0);
      cell.input.setAttribute("aria-invalid", notSaved ? "true" : "false");
    }
    const kind = this.status.kind;
    const message = ["stale", "busy", "login", "error"].includes(kind);
    this.statusBox.dataset.kind = kind;
    this.statusText.textContent = message ? this.status.text : "";
    this.stateBox.dataset.kind = kind;
    // Until the first save, the page's short note (how saving works, the done-state).
    this.stateBox.textContent = {
      idle: this.note, saving: "Saving…", saved: this.status.text,
      stale: "Reloaded", busy: "Not saved", login: "Not saved", error: "Not saved",
    }[kind];
    this.root.dataset.pair = this.pair;
    this.root.dataset.version = String(this.version);
    this.root.dataset.state = this.status.kind;
    if (this.lastSaveMs !== null) this.root.dataset.lastSaveMs = this.lastSaveMs.toFixed(1);
  }

  focused() {
    // Inside a shadow root the document only sees the host as focused.
    return this.parent.activeElement || document.activeElement;
  }

  setStatus(kind, text) {
    this.status = { kind, text };
    this.render();
  }

  // -- values ----------------------------------------------------------------------------

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

  persist() {
    writeStore(this.key, { ...(this.inflight || {}), ...this.pending }, this.version);
  }

  change(key, value) {
    if (this.readOnly) return;
    const next = Math.max(0, Math.min(MAX_COUNT, Math.trunc(value)));
    if (!Number.isFinite(next) || next === this.value(key)) {
      this.render();
      return;
    }
    this.pending[key] = next;
    this.persist();
    if (this.blocked === "login") {
      this.render(); // still logged out: kept here and in this browser, marked Not saved
      return;
    }
    this.render();
    this.flush();
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
    switch (event.key) {
      case "ArrowUp": event.preventDefault(); move(-1, 0); return;
      case "ArrowDown": event.preventDefault(); move(1, 0); return;
      case "ArrowLeft": event.preventDefault(); move(0, -1); return;
      case "ArrowRight": event.preventDefault(); move(0, 1); return;
      case "+": case "=":
        event.preventDefault(); this.change(key, this.value(key) + 1); event.target.select();
        return;
      case "-": case "_":
        event.preventDefault(); this.change(key, this.value(key) - 1); event.target.select();
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
    this.change(key, Number(raw));
  }

  // -- saving ----------------------------------------------------------------------------

  flush() {
    if (this.inflight) return;
    if (this.pendingCount() === 0 || this.blocked || this.readOnly) {
      this.settleWaiters();
      return;
    }
    if (this.retryTimer) {
      clearTimeout(this.retryTimer);
      this.retryTimer = null;
    }
    this.inflight = this.pending;
    this.pending = {};
    this.persist();
    if (this.status.kind !== "busy" && this.status.kind !== "stale") {
      this.setStatus("saving", "Saving…");
    }
    const sentAt = performance.now();
    const body = { pair: this.pair, version: this.version, cells: this.inflight, tag: this.tag };
    post(this.url, body).then(({ status, body: answer }) => {
      this.lastSaveMs = performance.now() - sentAt;
      this.answer(status, answer || {});
    });
  }

  answer(status, body) {
    const sent = this.inflight || {};
    this.inflight = null;
    if (status === 200) {
      this.version = body.version;
      this.stored = { ...body.counts };
      this.retryDelay = RETRY_FIRST_MS;
      this.persist();
      this.setStatus("saved", `Saved ${clock(body.saved_at)}`);
      if (this.pendingCount() > 0) this.flush();
      else this.settleWaiters();
      return;
    }
    if (status === 409 && alreadyStored(sent, body.counts)) {
      this.version = body.version;
      this.stored = { ...body.counts };
      this.persist();
      this.setStatus("saved", `Saved ${clock()}`);
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
        const text = status === 0
          ? `Not saved: the server cannot be reached; your change is kept and ${again}.`
          : `${body.message || "Not saved: the server is busy; your change is kept"} `
            + `(${again}).`;
        this.setStatus("busy", text);
        this.retryTimer = setTimeout(() => {
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

  clean() {
    return !this.inflight && this.pendingCount() === 0;
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

  // -- Mark done -------------------------------------------------------------------------

  doneButton() {
    for (const selector of DONE_SELECTORS) {
      const button = document.querySelector(selector);
      if (button) return button;
    }
    return null;
  }

  markDone() {
    this.settle().then((ok) => {
      if (!ok) {
        const note = "The pair is not marked done until your counts are saved.";
        if (this.status.kind !== "stale" && !this.status.text.includes(note)) {
          this.setStatus(this.status.kind, `${this.status.text} ${note}`);
        }
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
    if (!button || this.clean()) return;
    // A save is in flight or waiting: hold the click until it is stored.
    event.preventDefault();
    event.stopImmediatePropagation();
    this.markDone();
  }

  onWindowKey(event) {
    if (!this.root || !this.root.isConnected) return;
    if (event.key !== "Enter" || !(event.ctrlKey || event.metaKey)) return;
    // The page's own Ctrl+Enter shortcut would not wait for a save in flight (and does not
    // fire while a grid cell has the focus): the grid handles the key everywhere.
    event.preventDefault();
    event.stopImmediatePropagation();
    this.markDone();
  }

  destroy() {
    document.removeEventListener("click", this.onDocumentClick, true);
    window.removeEventListener("keydown", this.onWindowKey, true);
    if (this.retryTimer) clearTimeout(this.retryTimer);
    this.retryTimer = null;
  }
}

export default function countGrid(component) {
  const { data, parentElement } = component;
  let grid = instances.get(parentElement);
  if (!grid) {
    grid = new Grid(parentElement);
    instances.set(parentElement, grid);
  }
  grid.update(data);
  // Streamlit calls this function again with each new `data`, and may call a returned
  // cleanup when a newer call overtakes it; tear down only once the grid has left the page.
  return () => {
    setTimeout(() => {
      if (!parentElement.isConnected && !(parentElement.host && parentElement.host.isConnected)) {
        grid.destroy();
        instances.delete(parentElement);
      }
    }, 0);
  };
}
