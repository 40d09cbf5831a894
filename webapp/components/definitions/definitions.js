// RadConcord definitions panel: the six ReXVal error categories, one keystroke away.
//
// A "Definitions" button in the rating screen's header, and a panel fixed at the right of
// the window (not modal: the rater can keep reading the reports beside it). "?" opens or
// closes it from anywhere on the page, except while typing in a text field (a grid cell
// takes digits only, so "?" works there too); Esc closes it. Nothing is sent to the server
// and the page does not rerun: the pair, the grid's unsaved changes and the scroll position
// stay as they are, and the focus goes back to where it was when the panel opened.

const instances = new WeakMap();
export const OPEN_KEY = "?";
const TEXT_TYPES = new Set(["text", "search", "email", "password", "url", "tel", "number"]);

// The element that really has the focus, looking inside shadow roots (components).
function deepActive() {
  let active = document.activeElement;
  while (active && active.shadowRoot && active.shadowRoot.activeElement) {
    active = active.shadowRoot.activeElement;
  }
  return active;
}

// Whether a key pressed on `target` is typing text: then "?" is a character, not a command.
export function isTyping(target) {
  if (!target || !target.tagName) return false;
  if (target.isContentEditable) return true;
  const tag = target.tagName.toUpperCase();
  if (tag === "TEXTAREA" || tag === "SELECT") return true;
  if (tag !== "INPUT") return false;
  // The count grid's cells take digits only: "?" there means help, not a character.
  if ((target.inputMode || target.getAttribute("inputmode") || "") === "numeric") return false;
  return TEXT_TYPES.has((target.type || "text").toLowerCase());
}

function el(tag, cls, text) {
  const node = document.createElement(tag);
  if (cls) node.className = cls;
  if (text !== undefined) node.textContent = text;
  return node;
}

class Definitions {
  constructor(parent, data) {
    this.parent = parent;
    this.returnFocus = null;
    this.root = el("div", "rc-defs");
    this.button = el("button", "rc-defs-button");
    this.button.type = "button";
    this.button.setAttribute("aria-haspopup", "dialog");
    this.button.setAttribute("aria-expanded", "false");
    this.button.title = "Error category definitions (press ?)";
    this.button.append(el("span", "rc-defs-label", "Definitions"), el("kbd", "", "?"));
    this.button.addEventListener("click", () => this.toggle());
    this.panel = el("section", "rc-defs-panel");
    this.panel.setAttribute("role", "dialog");
    this.panel.setAttribute("aria-modal", "false");
    this.panel.setAttribute("aria-labelledby", "rc-defs-title");
    this.panel.tabIndex = -1;
    this.panel.hidden = true;
    this.root.append(this.button, this.panel);
    parent.append(this.root);
    this.data = data;
    this.onKey = this.onKey.bind(this);
    window.addEventListener("keydown", this.onKey, true);
  }

  // The panel's content is in the page only while it is open: closed, its words (examples
  // quoting reports) cannot be mistaken for the page's own text by a search or a reader.
  render(data) {
    this.panel.replaceChildren();
    const head = el("div", "rc-defs-head");
    const title = el("h2", "rc-defs-title", data.title);
    title.id = "rc-defs-title";
    const close = el("button", "rc-defs-close", "\u00d7");
    close.type = "button";
    close.setAttribute("aria-label", "Close the definitions (Esc)");
    close.addEventListener("click", () => this.close());
    head.append(title, close);
    const list = el("ol", "rc-defs-list");
    for (const item of data.definitions) {
      const li = el("li", "rc-defs-item");
      li.value = item.category;
      li.dataset.category = String(item.category);
      li.append(el("div", "rc-defs-name", item.name), el("div", "rc-defs-text", item.definition));
      const example = el("div", "rc-defs-example");
      example.append(el("span", "rc-defs-tag", "Example: "), document.createTextNode(item.example));
      li.append(example);
      list.append(li);
    }
    const sig = el("p", "rc-defs-sig", data.significance);
    const foot = el("p", "rc-defs-foot", "? opens and closes this panel · Esc closes it");
    this.panel.append(head, list, sig, foot);
  }

  get isOpen() {
    return !this.panel.hidden;
  }

  open() {
    if (this.isOpen) return;
    this.returnFocus = deepActive();
    this.render(this.data);
    this.panel.hidden = false;
    this.button.setAttribute("aria-expanded", "true");
    this.panel.focus({ preventScroll: true });
  }

  close() {
    if (!this.isOpen) return;
    this.panel.hidden = true;
    this.panel.replaceChildren();
    this.button.setAttribute("aria-expanded", "false");
    const back = this.returnFocus;
    this.returnFocus = null;
    // Back to where the rater was (a grid cell keeps its place in the keyboard order).
    if (back && back.isConnected && typeof back.focus === "function") {
      back.focus({ preventScroll: true });
    }
  }

  toggle() {
    if (this.isOpen) this.close();
    else this.open();
  }

  onKey(event) {
    if (!this.root.isConnected) return;
    if (event.key === "Escape" && this.isOpen) {
      event.preventDefault();
      event.stopImmediatePropagation();
      this.close();
      return;
    }
    if (event.key !== OPEN_KEY || event.ctrlKey || event.metaKey || event.altKey) return;
    const path = typeof event.composedPath === "function" ? event.composedPath() : [];
    if (isTyping(path[0] || event.target)) return;
    event.preventDefault();
    event.stopImmediatePropagation();
    this.toggle();
  }

  destroy() {
    window.removeEventListener("keydown", this.onKey, true);
  }
}

export default function definitions(component) {
  const { data, parentElement } = component;
  let panel = instances.get(parentElement);
  if (!panel) {
    panel = new Definitions(parentElement, data);
    instances.set(parentElement, panel);
  } else {
    panel.data = data;
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
