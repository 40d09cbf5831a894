// RadConcord per-error records: mark the erroneous words of the candidate report, or a sentence
// of the reference the candidate leaves out, with a ReXVal category and significance.
//
// Every change is stored by the panel itself through the JSON routes of
// webapp/api/error_records.py (POST <url>/add, POST <url>/delete), with the version of the pair
// it shows, like the count grid does:
//
//   200 {version, counts, records, saved_at} -> "Saved hh:mm:ss"; the page reruns so the
//                                               read-only grid shows the derived counts
//   409 {version, counts, records}           -> another window changed the pair: the stored
//                                               records are shown, the selection is kept
//   401                                      -> the session ended: log in again
//   400 / 403 / 404 / 503 / network error    -> "Not saved" with the reason; nothing stored
//
// Keyboard first (the words box has the focus):
//   Left/Right move the word cursor (word to word, past punctuation), Shift+Left/Right
//   extend the selection, Home/End; a span saved starts and ends on words;
//   1-6 pick the category (a span of the candidate is 1, 3, 4 or 5; an omission 2 or 6, as
//   the service's KIND_CATEGORIES), S marks it clinically significant and I insignificant,
//   Enter saves the error,
//   Delete (or Backspace) removes the record under the cursor (or the focused list entry),
//   O switches to omissions: Up/Down (or Left/Right) pick a sentence of the reference, Enter
//   saves it; O or Escape goes back to the candidate's words. Escape clears the selection.
// The mouse works too: press and drag over words, Shift+click extends, click a sentence.
//
// Significance is a state of its own, shown on two buttons: null (not chosen), true or false.
// Every error starts with none chosen and is saved only with one; S and I set it (a toggle
// turned a stale choice upside down), and every save, stored or refused, clears it, so the
// choice made for one error never carries over to the next. A refused save says why on the
// panel's own line (`.rc-er-why`), in the service's words for a category that does not fit.
//
// `Marker` (selection, choices and the payloads it saves) touches no DOM:
// tests/unit/test_error_records_js.py runs it in node. `Panel` draws it.

export const CATEGORY_KEYS = ["1", "2", "3", "4", "5", "6"];
export const HINT_SPAN = "Arrows move, Shift+arrows select · 1, 3, 4 or 5 category · "
  + "S significant / I insignificant · Enter save · Del remove · O omission (2 or 6)";
export const HINT_OMISSION = "Up/Down pick the reference sentence the candidate leaves out · "
  + "2 or 6 category · S / I significance · Enter save · O back";
export const CHOOSE_SIGNIFICANCE = "choose the significance: S clinically significant, "
  + "I insignificant";
export const KIND_CATEGORIES = { span: [1, 3, 4, 5], omission: [2, 6] };
const STALE_TEXT = "Not saved: changed in another window, reloaded. Check and save again.";

const instances = new WeakMap();

// Why `category` does not fit `mode` ("span" or "omission"), or null when it does. `refusals`
// are the service's words (panel_data); the fallback says the same rule.
export function categoryRefusal(mode, category, refusals = {}) {
  const kind = mode === "omission" ? "omission" : "span";
  if (category === null || KIND_CATEGORIES[kind].includes(category)) return null;
  const given = (refusals[kind] || {})[String(category)];
  if (given) return given;
  return kind === "span"
    ? `category ${category} is an omission: press O on a reference sentence the candidate `
      + "leaves out"
    : `category ${category} marks wrong words of the candidate, not an omission: press O to `
      + "go back to the candidate's words";
}

// Words (letters and digits, with inner dots, hyphens, apostrophes and slashes: "1.5",
// "T11-T12", "don't") and single punctuation marks, with their offsets in `text`.
const TOKEN = /[\p{L}\p{N}]+(?:[.\-'’/:][\p{L}\p{N}]+)*|[^\s\p{L}\p{N}]/gu;

export function tokenize(text) {
  const tokens = [];
  for (const m of String(text || "").matchAll(TOKEN)) {
    tokens.push({ start: m.index, end: m.index + m[0].length, text: m[0] });
  }
  return tokens;
}

// A token holding a letter or digit: the arrows step from word to word, and a saved span
// starts and ends on words (a lone "." or ":" is no error; the server refuses it too).
const WORDISH = /[\p{L}\p{N}]/u;
export function isWord(token) {
  return Boolean(token) && WORDISH.test(token.text);
}

// Indexes of the tokens a record's candidate span covers (any overlap).
export function coveredTokens(tokens, start, end) {
  const out = [];
  tokens.forEach((t, i) => {
    if (t.start < end && t.end > start) out.push(i);
  });
  return out;
}

// For each token, the span records that cover it (in record order).
export function tokenMarks(tokens, records) {
  const marks = tokens.map(() => []);
  for (const r of records || []) {
    if (r.kind !== "span") continue;
    for (const i of coveredTokens(tokens, r.candidate_start, r.candidate_end)) marks[i].push(r);
  }
  return marks;
}

export function clock(iso) {
  const at = iso ? new Date(iso) : new Date();
  const pad = (n) => String(n).padStart(2, "0");
  return `${pad(at.getHours())}:${pad(at.getMinutes())}:${pad(at.getSeconds())}`;
}

// POST a JSON body; resolves {status, body}. A network failure is status 0.
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

// The selection, the choices and the saves of one pair; no DOM.
export class Marker {
  constructor({ pair, url, version, candidate, sentences, records, readOnly = false,
                refusals = {}, post = postJson, onChange = () => {}, onSaved = () => {} }) {
    this.pair = pair;
    this.url = url;
    this.version = version;
    this.tokens = tokenize(candidate);
    this.sentences = sentences || [];
    this.records = records || [];
    this.readOnly = readOnly;
    this.refusals = refusals || {};
    this.post = post;
    this.onChange = onChange;
    this.onSaved = onSaved;
    this.mode = "span"; // or "omission"
    this.cursor = this.tokens.length ? 0 : -1;
    this.anchor = null; // null: nothing selected
    this.sentence = this.sentences.length ? 0 : -1;
    this.sentencePicked = false;
    this.category = null;
    this.significant = null; // null: not chosen yet; true / false once S / I is pressed
    this.note = "";
    this.busy = false;
    this.status = { kind: "idle", text: "" };
  }

  changed() {
    this.onChange(this);
  }

  // A new choice answers the last refusal: its reason gives way to what is chosen now.
  settle() {
    if (this.status.kind === "refused" || this.status.kind === "hint") {
      this.status = { kind: "idle", text: "" };
    }
  }

  // The selected token range [lo, hi], or null.
  range() {
    if (this.anchor === null || this.cursor < 0) return null;
    return [Math.min(this.anchor, this.cursor), Math.max(this.anchor, this.cursor)];
  }

  // -- selection -------------------------------------------------------------------------

  moveTo(index, { extend = false } = {}) {
    if (this.mode === "omission") {
      if (!this.sentences.length) return;
      this.sentence = Math.max(0, Math.min(this.sentences.length - 1, index));
      this.sentencePicked = true;
      this.settle();
      this.changed();
      return;
    }
    if (!this.tokens.length) return;
    const next = Math.max(0, Math.min(this.tokens.length - 1, index));
    if (extend) {
      if (this.anchor === null) this.anchor = this.cursor;
    } else {
      this.anchor = next;
    }
    this.cursor = next;
    this.settle();
    this.changed();
  }

  step(delta, { extend = false } = {}) {
    if (this.mode === "omission") {
      this.moveTo(this.sentencePicked ? this.sentence + delta : Math.max(this.sentence, 0));
      return;
    }
    // The first arrow selects the word under the cursor; the next ones move to the next
    // word, past punctuation.
    if (this.anchor === null && !extend) this.moveTo(this.cursor);
    else this.moveTo(this.nextWord(this.cursor, delta), { extend });
  }

  // The nearest word token from `index` in direction `delta` (`index` when there is none).
  nextWord(index, delta) {
    for (let i = index + delta; i >= 0 && i < this.tokens.length; i += delta) {
      if (isWord(this.tokens[i])) return i;
    }
    return index;
  }

  clearSelection() {
    this.anchor = null;
    this.sentencePicked = false;
    this.settle();
    this.changed();
  }

  setMode(mode) {
    if (mode === this.mode) return;
    this.mode = mode;
    this.anchor = null;
    this.sentencePicked = false;
    this.setStatus("idle", "");
  }

  pickCategory(category) {
    this.category = category;
    // Said at once: a category this mode cannot carry is refused on Enter anyway.
    const why = categoryRefusal(this.mode, category, this.refusals);
    if (why) this.status = { kind: "hint", text: `${why}.` };
    else this.settle();
    this.changed();
  }

  // S sets true, I sets false: pressing S twice still means significant.
  setSignificant(significant) {
    this.significant = Boolean(significant);
    this.settle();
    this.changed();
  }

  // The record to send for the current selection, or a reason why there is none.
  payload() {
    if (this.category === null) return { error: "pick a category first (keys 1-6)" };
    // The service's rule (backend/services/annotation/error_records.py KIND_CATEGORIES) and
    // its words, said before a round trip.
    const why = categoryRefusal(this.mode, this.category, this.refusals);
    if (why) return { error: why };
    const body = this.selectionPayload();
    if (body.error) return body;
    if (this.significant === null) return { error: CHOOSE_SIGNIFICANCE };
    return body;
  }

  // The record's kind, offsets and choices for the current selection, or why there is none.
  selectionPayload() {
    const base = { pair: this.pair, version: this.version, category: this.category,
                   significant: this.significant, note: this.note.trim() };
    if (this.mode === "omission") {
      const s = this.sentencePicked ? this.sentences[this.sentence] : null;
      if (!s) return { error: "pick the omitted sentence of the reference first (Up/Down)" };
      return { ...base, kind: "omission", reference_start: s.start, reference_end: s.end };
    }
    const r = this.range();
    if (!r) return { error: "select the erroneous words first (arrows, Shift+arrows)" };
    // Punctuation at either edge (a drag or Home/End over ", ") stays out of the span.
    let [lo, hi] = r;
    while (lo <= hi && !isWord(this.tokens[lo])) lo += 1;
    while (hi >= lo && !isWord(this.tokens[hi])) hi -= 1;
    if (lo > hi) return { error: "select words, not only punctuation" };
    return { ...base, kind: "span", candidate_start: this.tokens[lo].start,
             candidate_end: this.tokens[hi].end };
  }

  // The record under the cursor (the latest one), for Delete: a span over the cursor's word,
  // or in omission mode an omission of the cursor's sentence.
  recordAtCursor() {
    if (this.mode === "omission") {
      const s = this.sentences[this.sentence];
      const hits = s ? this.records.filter((r) => r.kind === "omission"
        && r.reference_start === s.start && r.reference_end === s.end) : [];
      return hits.length ? hits[hits.length - 1] : null;
    }
    if (this.cursor < 0) return null;
    const t = this.tokens[this.cursor];
    const hits = this.records.filter((r) => r.kind === "span"
      && r.candidate_start < t.end && r.candidate_end > t.start);
    return hits.length ? hits[hits.length - 1] : null;
  }

  // -- saving ----------------------------------------------------------------------------

  setStatus(kind, text) {
    this.status = { kind, text };
    this.changed();
  }

  adopt(body) {
    if (typeof body.version === "number") this.version = body.version;
    if (Array.isArray(body.records)) this.records = body.records;
  }

  // A newer page run: take its records unless this panel already has a newer version.
  refresh(version, records, readOnly) {
    this.readOnly = readOnly;
    if (version >= this.version && !this.busy) {
      this.version = version;
      this.records = records || [];
    }
    this.changed();
  }

  async send(path, body) {
    this.busy = true;
    this.changed();
    const { status, body: answer } = await this.post(`${this.url}/${path}`, body);
    this.busy = false;
    if (status === 200) {
      this.adopt(answer);
      this.setStatus("saved", `Saved ${clock(answer.saved_at)}`);
      this.onSaved(answer);
      return true;
    }
    // A refused save: the significance chosen for it goes (see the top of this file).
    if (path === "add") this.significant = null;
    if (status === 409) {
      this.adopt(answer);
      this.setStatus("stale", STALE_TEXT);
    } else if (status === 401) {
      this.setStatus("error", (answer && answer.message)
        || "Not saved: your session has ended. Log in again.");
    } else if (status === 0) {
      this.setStatus("error", "Not saved: the server can't be reached. Try again.");
    } else {
      const why = (answer && answer.message) || `the server answered ${status}`;
      this.setStatus(status === 400 ? "refused" : "error",
                     why.startsWith("Not saved") ? why : `Not saved: ${why}`);
    }
    return false;
  }

  async save() {
    if (this.readOnly || this.busy) return false;
    const body = this.payload();
    if (body.error) {
      // A refused save clears the significance too: the next Enter needs a fresh S or I.
      const chosen = this.significant !== null && body.error !== CHOOSE_SIGNIFICANCE;
      this.significant = null;
      this.setStatus("refused", `Not saved: ${body.error}.`
        + (chosen ? " Significance cleared: press S or I again." : ""));
      return false;
    }
    const ok = await this.send("add", body);
    if (ok) {
      // A fresh start for the next error: category and significance are chosen again.
      this.anchor = null;
      this.sentencePicked = false;
      this.category = null;
      this.significant = null;
      this.note = "";
      this.changed();
    }
    return ok;
  }

  async remove(record) {
    if (this.readOnly || this.busy || !record) return false;
    return this.send("delete", { pair: this.pair, version: this.version, record: record.id });
  }

  // One key press in the words box; true when the panel handled it.
  key({ key, shiftKey = false, ctrlKey = false, metaKey = false, altKey = false }) {
    if (ctrlKey || metaKey || altKey) return false;
    const lower = key.length === 1 ? key.toLowerCase() : key;
    if (key === "ArrowRight" || key === "ArrowDown" && this.mode === "omission") {
      this.step(1, { extend: shiftKey });
    } else if (key === "ArrowLeft" || key === "ArrowUp" && this.mode === "omission") {
      this.step(-1, { extend: shiftKey });
    } else if (key === "Home") {
      this.moveTo(0, { extend: shiftKey });
    } else if (key === "End") {
      this.moveTo(this.mode === "omission" ? this.sentences.length - 1 : this.tokens.length - 1,
                  { extend: shiftKey });
    } else if (CATEGORY_KEYS.includes(key)) {
      this.pickCategory(Number(key));
    } else if (lower === "s" && !shiftKey) {
      this.setSignificant(true);
    } else if (lower === "i" && !shiftKey) {
      this.setSignificant(false);
    } else if (lower === "o" && !shiftKey) {
      this.setMode(this.mode === "omission" ? "span" : "omission");
    } else if (key === "Escape") {
      if (this.mode === "omission" && !this.sentencePicked) this.setMode("span");
      else this.clearSelection();
    } else if (key === "Enter") {
      this.save();
    } else if (key === "Delete" || key === "Backspace") {
      const record = this.recordAtCursor();
      if (record) this.remove(record);
      else this.setStatus("hint", this.mode === "omission"
        ? "This sentence is not marked as omitted." : "No marked error under the cursor.");
    } else {
      return false;
    }
    return true;
  }
}

function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

// Imported records (RadPref) may carry no span: their note says what they are.
function recordLabel(record) {
  const text = (record.kind === "span" ? record.candidate_text : record.reference_text) || "";
  if (!text) return record.kind === "span" ? "(no words marked)" : "missing: (no sentence)";
  return record.kind === "span" ? `“${text}”` : `missing: “${text}”`;
}

class Panel {
  constructor(parentElement, data, setTriggerValue) {
    this.parent = parentElement;
    this.pair = data.pair;
    this.categories = data.categories;
    this.candidate = data.candidate;
    this.setTriggerValue = setTriggerValue;
    this.marker = new Marker({
      pair: data.pair, url: data.url, version: data.version, candidate: data.candidate,
      sentences: data.sentences, records: data.records, readOnly: data.read_only,
      refusals: data.refusals,
      onChange: () => this.render(),
      onSaved: (answer) => this.setTriggerValue("saved",
        { version: answer.version, at: answer.saved_at }),
    });
    this.dragging = false;
    this.build();
    this.render();
    this.onMouseUp = () => { this.dragging = false; };
    document.addEventListener("mouseup", this.onMouseUp);
  }

  update(data, setTriggerValue) {
    this.setTriggerValue = setTriggerValue;
    this.marker.refresh(data.version, data.records, data.read_only);
  }

  build() {
    const m = this.marker;
    const root = el("div", "rc-er");
    root.setAttribute("role", "group");
    root.setAttribute("aria-label", "Error records");
    this.modeButton = el("button", "rc-er-mode");
    this.modeButton.type = "button";
    this.modeButton.addEventListener("click", () => {
      m.setMode(m.mode === "omission" ? "span" : "omission");
      this.box.focus();
    });

    // The words of the candidate (or the reference's sentences): the keyboard's home.
    this.box = el("div", "rc-er-box");
    this.box.tabIndex = 0;
    this.box.setAttribute("role", "listbox");
    this.box.setAttribute("aria-multiselectable", "true");
    this.box.addEventListener("keydown", (event) => {
      if (event.target !== this.box) return;
      if (m.key(event)) {
        // Stop here: N, P, S... are the page's shortcuts elsewhere, not in this box.
        event.preventDefault();
        event.stopPropagation();
      }
    });
    this.words = [];
    let last = 0;
    this.wordLayer = el("div", "rc-er-words");
    m.tokens.forEach((t, i) => {
      if (t.start > last) this.wordLayer.append(document.createTextNode(
        this.candidate.slice(last, t.start)));
      const w = el("span", "rc-er-word", t.text);
      w.setAttribute("role", "option");
      w.dataset.i = String(i);
      w.addEventListener("mousedown", (event) => {
        if (m.readOnly) return;
        event.preventDefault();
        this.box.focus();
        this.dragging = true;
        m.moveTo(i, { extend: event.shiftKey });
      });
      w.addEventListener("mouseenter", () => {
        if (this.dragging) m.moveTo(i, { extend: true });
      });
      this.wordLayer.append(w);
      this.words.push(w);
      last = t.end;
    });
    if (last < this.candidate.length) {
      this.wordLayer.append(document.createTextNode(this.candidate.slice(last)));
    }
    this.sentenceLayer = el("ol", "rc-er-sentences");
    this.sentenceItems = m.sentences.map((s, i) => {
      const item = el("li", "rc-er-sentence", s.text);
      item.setAttribute("role", "option");
      item.addEventListener("mousedown", (event) => {
        if (m.readOnly) return;
        event.preventDefault();
        this.box.focus();
        m.moveTo(i);
      });
      this.sentenceLayer.append(item);
      return item;
    });
    this.box.append(this.wordLayer, this.sentenceLayer);

    // Category, significance, note, save.
    const controls = el("div", "rc-er-controls");
    this.catButtons = this.categories.map((c) => {
      const b = el("button", `rc-er-cat rc-er-c${c.category}`, String(c.category));
      b.type = "button";
      b.title = `${c.category}. ${c.label}`;
      b.setAttribute("aria-label", `Category ${c.category}: ${c.label}`);
      b.addEventListener("click", () => { m.pickCategory(c.category); this.box.focus(); });
      controls.append(b);
      return b;
    });
    // Significance: two buttons, one pressed once chosen; none pressed (and the group
    // framed in amber, data-state "unset") until S or I is pressed for this error.
    this.sigGroup = el("span", "rc-er-sigs");
    this.sigGroup.setAttribute("role", "group");
    this.sigGroup.setAttribute("aria-label", "Clinical significance");
    this.sigButtons = [[true, "Significant (S)", "Clinically significant (S)"],
      [false, "Insignificant (I)", "Clinically insignificant (I)"]].map(([value, text, title]) => {
      const b = el("button", `rc-er-sig ${value ? "rc-er-sig-yes" : "rc-er-sig-no"}`, text);
      b.type = "button";
      b.title = title;
      b.addEventListener("click", () => { m.setSignificant(value); this.box.focus(); });
      this.sigGroup.append(b);
      return b;
    });
    this.noteInput = el("input", "rc-er-note");
    this.noteInput.type = "text";
    this.noteInput.maxLength = 2000;
    this.noteInput.placeholder = "Note (optional)";
    this.noteInput.setAttribute("aria-label", "Note");
    this.noteInput.addEventListener("input", () => { m.note = this.noteInput.value; });
    this.noteInput.addEventListener("keydown", (event) => {
      if (event.key === "Enter") {
        event.preventDefault();
        m.save().then((ok) => { if (ok) this.box.focus(); });
      } else if (event.key === "Escape") {
        this.box.focus();
      }
    });
    this.saveButton = el("button", "rc-er-save", "Save error");
    this.saveButton.type = "button";
    this.saveButton.title = "Enter";
    this.saveButton.addEventListener("click", () => {
      m.save().then(() => this.box.focus());
    });
    controls.append(this.sigGroup, this.noteInput, this.saveButton, this.modeButton);
    this.controls = controls;

    // Why the last save was refused (or a hint), in words, until the next choice.
    this.why = el("div", "rc-er-why");
    this.why.setAttribute("role", "alert");

    // What the next save will store, and the state of the last one, on one line.
    const line = el("div", "rc-er-line");
    this.summary = el("span", "rc-er-summary");
    this.list = el("ul", "rc-er-list");
    this.list.setAttribute("aria-label", "Marked errors");
    this.state = el("span", "rc-er-state");
    this.state.setAttribute("role", "status");
    this.state.setAttribute("aria-live", "polite");
    line.append(this.summary, this.state);
    root.append(this.box, controls, this.why, line, this.list);
    this.root = root;
    this.parent.appendChild(root);
  }

  render() {
    const m = this.marker;
    const omission = m.mode === "omission";
    this.root.classList.toggle("rc-er-readonly", m.readOnly);
    this.root.classList.toggle("rc-er-omission", omission);
    this.modeButton.textContent = omission ? "Words (O)" : "Omission (O)";
    this.modeButton.title = omission ? "Back to marking words of the candidate"
      : "Mark a sentence of the reference that the candidate leaves out";
    this.modeButton.setAttribute("aria-pressed", omission ? "true" : "false");
    this.box.title = omission ? HINT_OMISSION : HINT_SPAN;
    this.box.setAttribute("aria-label", omission ? "Sentences of the reference report"
      : "Words of the candidate report");
    this.wordLayer.hidden = omission;
    this.sentenceLayer.hidden = !omission;

    const range = m.range();
    const marks = tokenMarks(m.tokens, m.records);
    this.words.forEach((w, i) => {
      const hits = marks[i];
      w.className = "rc-er-word";
      if (hits.length) {
        const r = hits[hits.length - 1];
        w.classList.add("rc-er-mark", `rc-er-c${r.category}`);
        if (r.significant) w.classList.add("rc-er-significant");
        if (hits.length > 1) w.classList.add("rc-er-multi");
        w.title = hits.map((h) => `${h.category}${h.significant ? " significant" : ""}`)
          .join(", ");
      } else {
        w.removeAttribute("title");
      }
      const selected = range && i >= range[0] && i <= range[1];
      if (selected) w.classList.add("rc-er-selected");
      if (i === m.cursor && !omission) w.classList.add("rc-er-cursor");
      w.setAttribute("aria-selected", selected ? "true" : "false");
    });
    const omitted = new Set(m.records.filter((r) => r.kind === "omission")
      .map((r) => `${r.reference_start}:${r.reference_end}`));
    this.sentenceItems.forEach((item, i) => {
      const s = m.sentences[i];
      item.className = "rc-er-sentence";
      if (omitted.has(`${s.start}:${s.end}`)) item.classList.add("rc-er-omitted");
      if (i === m.sentence) item.classList.add("rc-er-cursor");
      const picked = i === m.sentence && m.sentencePicked;
      if (picked) item.classList.add("rc-er-selected");
      item.setAttribute("aria-selected", picked ? "true" : "false");
    });

    this.controls.hidden = m.readOnly;
    this.catButtons.forEach((b, i) => {
      b.setAttribute("aria-pressed", m.category === i + 1 ? "true" : "false");
    });
    const sigState = m.significant === null ? "unset"
      : (m.significant ? "significant" : "insignificant");
    this.sigGroup.dataset.state = sigState;
    this.sigButtons.forEach((b, i) => {
      const on = m.significant === (i === 0);
      b.setAttribute("aria-pressed", on ? "true" : "false");
      b.classList.toggle("rc-er-on", on);
    });
    if (this.noteInput.value !== m.note) this.noteInput.value = m.note;
    this.saveButton.disabled = m.busy;

    const chosen = m.category === null ? "no category yet"
      : `${m.category}. ${this.categories[m.category - 1].label}`;
    let what = "";
    if (omission && m.sentencePicked) what = `“${m.sentences[m.sentence].text}” missing`;
    if (!omission && range) {
      what = `“${this.candidate.slice(m.tokens[range[0]].start, m.tokens[range[1]].end)}”`;
    }
    const significance = m.significant === null ? "significance not chosen (S or I)"
      : (m.significant ? "clinically significant" : "clinically insignificant");
    if (m.readOnly) this.summary.textContent = "Study closed: read only";
    else if (what) this.summary.textContent = `${what} → ${chosen}, ${significance}`;
    else this.summary.textContent = omission ? HINT_OMISSION : HINT_SPAN;

    this.list.replaceChildren();
    if (!m.records.length) {
      this.list.append(el("li", "rc-er-empty", "No errors marked yet."));
    }
    for (const r of m.records) {
      const item = el("li", `rc-er-item rc-er-c${r.category}`);
      item.tabIndex = 0;
      item.dataset.record = String(r.id);
      const badge = el("span", "rc-er-badge", `${r.category}${r.significant ? "S" : "i"}`);
      badge.title = `${this.categories[r.category - 1].label}, clinically `
        + `${r.significant ? "significant" : "insignificant"}`;
      const text = el("span", "rc-er-text", recordLabel(r));
      item.append(badge, text);
      if (r.note) item.append(el("span", "rc-er-itemnote", `— ${r.note}`));
      if (!m.readOnly) {
        const del = el("button", "rc-er-del", "×");
        del.type = "button";
        del.tabIndex = -1;
        del.setAttribute("aria-label", `Delete ${recordLabel(r)}`);
        del.addEventListener("click", () => m.remove(r));
        item.append(del);
        item.addEventListener("keydown", (event) => {
          if (event.key === "Delete" || event.key === "Backspace") {
            event.preventDefault();
            event.stopPropagation();
            m.remove(r).then(() => this.box.focus());
          }
        });
      }
      this.list.append(item);
    }
    // The short state on the summary's line; the reason of a refusal on a line of its own.
    const kind = m.busy ? "busy" : m.status.kind;
    const long = ["refused", "hint", "error", "stale"].includes(kind);
    this.state.textContent = m.busy ? "Saving…"
      : (long ? (kind === "hint" ? "" : "Not saved") : m.status.text);
    this.state.dataset.kind = kind;
    this.why.textContent = long ? m.status.text : "";
    this.why.dataset.kind = kind;
    this.why.hidden = !long;
  }

  destroy() {
    document.removeEventListener("mouseup", this.onMouseUp);
  }
}

export default function errorRecords(component) {
  const { data, parentElement, setTriggerValue } = component;
  let panel = instances.get(parentElement);
  if (panel && panel.pair !== data.pair) {
    panel.destroy();
    panel.root.remove();
    panel = null;
  }
  if (!panel) {
    panel = new Panel(parentElement, data, setTriggerValue);
    instances.set(parentElement, panel);
  } else {
    panel.update(data, setTriggerValue);
  }
  return () => {
    setTimeout(() => {
      const host = parentElement.host;
      if (!parentElement.isConnected && !(host && host.isConnected)) {
        panel.destroy();
        instances.delete(parentElement);
      }
    }, 0);
  };
}
