// Time on task from the rater's own events (see backend/services/activity.py for the rules).
//
// createTracker() is the pure part (no DOM, times in ms): it turns events, pair changes and
// inactivity into spans {pair, start, end, events}. The default export wires it to the page:
// one tracker per page load (window.__radconcordActivity), listening on `document` in the
// capture phase so events inside shadow roots and canvases count too (keys, pointer presses
// and moves, wheel, input; window focus; tab visibility), and sending the spans
// to POST _rc/api/activity every flush interval, on a change of pair and when the page is
// hidden or left (fetch with keepalive and the X-RadConcord header; never sendBeacon, which
// cannot carry the header). A 401 (session ended) keeps the spans for a later send.

/**
 * The activity clock of one page.
 *
 * Rules: an event makes the rater active until `idleMs` after it; time counts while active
 * and visible and focused, and goes to the pair on screen; `inactive` (tab hidden, window
 * blurred, page left) stops it at once.
 *
 * @param {{idleMs: number}} options  Times passed to the methods are whole milliseconds.
 */
export function createTracker({ idleMs }) {
  let pair = null;
  let open = null; // {pair, start, events}
  let activeUntil = -Infinity;
  let closed = [];

  function close(end) {
    // Empty spans are dropped: they carry no time.
    if (open !== null && end > open.start) {
      closed.push({ pair: open.pair, start: open.start, end, events: open.events });
    }
    open = null;
  }

  return {
    /** An input or focus event of the rater at time t. */
    activity(t) {
      if (open !== null && t > activeUntil) close(activeUntil);
      activeUntil = t + idleMs;
      if (pair === null) return;
      if (open === null) open = { pair, start: t, events: 0 };
      open.events += 1;
    },
    /** The pair on screen changed (null: none) at time t. */
    setPair(next, t) {
      if (next === pair) return;
      if (open !== null) close(Math.min(t, activeUntil));
      pair = next;
      // Still active from the last event (the click that moved on): the new pair's time
      // starts now.
      if (pair !== null && t < activeUntil) open = { pair, start: t, events: 0 };
    },
    /** Hidden tab, blurred window or page left at time t: nothing counts until an event. */
    inactive(t) {
      if (open !== null) close(Math.min(t, activeUntil));
      activeUntil = -Infinity;
    },
    /** The spans finished by time t; an open one is cut at t and goes on from t. */
    take(t) {
      if (open !== null) {
        if (t >= activeUntil) {
          close(activeUntil);
        } else if (t > open.start) {
          const current = open.pair;
          close(t);
          open = { pair: current, start: t, events: 0 };
        }
      }
      const out = closed;
      closed = [];
      return out;
    },
    get pair() {
      return pair;
    },
  };
}

const GLOBAL = "__radconcordActivity";
const MOVE_THROTTLE_MS = 200;
const MAX_BATCH = 200;
const MAX_QUEUE = 5000;
const UNMOUNT_GRACE_MS = 250;

function randomId() {
  if (globalThis.crypto && typeof globalThis.crypto.randomUUID === "function") {
    return globalThis.crypto.randomUUID();
  }
  return Array.from({ length: 32 }, () => Math.floor(Math.random() * 16).toString(16))
    .join("");
}

function install(data) {
  // One clock per page load, set to the server's: spans of two tabs are compared with each
  // other and checked against the server's time, and resends must carry the same times.
  // Whole milliseconds: a span cut at t and the one going on from t never share a start
  // (the server stores one span per page load, pair and start).
  const base = () => performance.timeOrigin + performance.now();
  const offset = Number(data.server_now_ms) - base();
  const clock = () => Math.round(base() + (Number.isFinite(offset) ? offset : 0));
  const state = {
    clientId: randomId(),
    url: data.url,
    account: typeof data.account === "string" ? data.account : null,
    tracker: createTracker({ idleMs: Number(data.idle_ms) || 30000 }),
    queue: [],
    sending: false,
    mounts: 0,
    flushMs: Number(data.flush_ms) || 10000,
    lastMove: -Infinity,
    timer: null,
    clock,
  };

  function visibleAndFocused() {
    return document.visibilityState === "visible" && document.hasFocus();
  }

  function collect() {
    // Each span carries the account it was measured for (see flush).
    const spans = state.tracker.take(clock()).map((span) => ({ ...span,
                                                               account: state.account }));
    state.queue.push(...spans);
    if (state.queue.length > MAX_QUEUE) state.queue.splice(0, state.queue.length - MAX_QUEUE);
  }

  async function flush(keepalive = false) {
    collect();
    // Spans measured without an account (none logged in) can go nowhere.
    state.queue = state.queue.filter((span) => span.account !== null);
    if (state.queue.length === 0 || (state.sending && !keepalive)) return;
    // One account per request: the route refuses spans of another account than the cookie's
    // (409), and those are dropped rather than credited to the next rater.
    const account = state.queue[0].account;
    const batch = state.queue.filter((span) => span.account === account).slice(0, MAX_BATCH);
    state.sending = !keepalive || state.sending;
    try {
      const reply = await fetch(state.url, {
        method: "POST",
        credentials: "same-origin",
        keepalive,
        headers: { "Content-Type": "application/json", "X-RadConcord": "1" },
        body: JSON.stringify({
          client_id: state.clientId,
          account,
          // A span without an event of its own (cut at a send, or opened by a change of
          // pair) continues the activity of the event before it, which is sent as its one:
          // the server takes no span without an event.
          spans: batch.map(({ pair, start, end, events }) => ({
            pair, start, end, events: Math.max(events, 1),
          })),
        }),
      });
      // 200: stored (refused spans are named and dropped); 400: a malformed batch that no
      // resend can fix; 409: another account's spans. Anything else (401 login again, 5xx,
      // network) keeps the spans.
      if (reply.status === 200 || reply.status === 400 || reply.status === 409) {
        state.queue = state.queue.filter((span) => !batch.includes(span));
        if (reply.status === 400) console.warn("activity spans refused", await reply.text());
      }
    } catch (err) {
      // Offline or the server restarting: the next flush sends them again.
    } finally {
      if (!keepalive) state.sending = false;
    }
    if (!keepalive && state.queue.length > 0 && state.queue.length >= MAX_BATCH) flush();
  }

  const onEvent = () => {
    if (visibleAndFocused()) state.tracker.activity(clock());
  };
  const onMove = () => {
    const t = clock();
    if (t - state.lastMove < MOVE_THROTTLE_MS) return;
    state.lastMove = t;
    onEvent();
  };
  const onHidden = () => {
    state.tracker.inactive(clock());
    flush(true);
  };
  // Only events the rater makes: a "scroll" or an element's "focusin" also follows a page
  // re-render or a script (Streamlit scrolls and focuses on its own); the rater's scrolling
  // and focusing come with wheel, key or pointer events, which are listened to.
  const capture = { capture: true, passive: true };
  for (const type of ["keydown", "pointerdown", "wheel", "input"]) {
    document.addEventListener(type, onEvent, capture);
  }
  document.addEventListener("pointermove", onMove, capture);
  document.addEventListener("visibilitychange", () => {
    if (document.visibilityState === "visible") onEvent();
    else onHidden();
  }, capture);
  // Not in the capture phase: there a window listener would also get every element's
  // focus and blur (an input losing focus is not the window losing it).
  window.addEventListener("focus", (event) => {
    if (event.target === window) onEvent();
  });
  window.addEventListener("blur", (event) => {
    if (event.target !== window) return;
    state.tracker.inactive(clock());
    flush();
  });
  window.addEventListener("pagehide", onHidden, capture);
  state.timer = setInterval(() => flush(), state.flushMs);

  state.mount = (next) => {
    state.mounts += 1;
    if (next.url) state.url = next.url;
    const account = typeof next.account === "string" ? next.account : null;
    if (account !== state.account) {
      // Another account on this page load (a logout and a login): what was measured so far
      // is the previous account's.
      state.tracker.setPair(null, clock());
      collect();
      state.account = account;
    }
    const pair = typeof next.pair === "string" && next.pair ? next.pair : null;
    if (pair !== state.tracker.pair) {
      state.tracker.setPair(pair, clock());
      flush();
    }
    return state.mounts;
  };
  state.unmount = (token) => {
    // A rerun may take the element down and put it back: only a tracker that stays gone
    // (the rater left the rating page) stops attributing time.
    setTimeout(() => {
      if (token === state.mounts) {
        state.tracker.setPair(null, clock());
        flush();
      }
    }, UNMOUNT_GRACE_MS);
  };
  state.flush = flush;
  // Loading the page was the rater's doing (a click, a link, a reload).
  onEvent();
  return state;
}

export default function activityTracker(component) {
  const data = component.data || {};
  const state = window[GLOBAL] || (window[GLOBAL] = install(data));
  const token = state.mount(data);
  return () => state.unmount(token);
}
