// Widgets the allocation and client pages share, for pages redrawn on every event.
//
// A redraw that built new buttons each time would take the keyboard focus away from a person
// who tabbed onto one (the focused node leaves the document) and would swap the button under a
// pointer mid-click. So action buttons are made once per key and reused by every redraw (only
// their label and disabled state change), and a redraw gives the focus back to the element that
// had it when that element is still in the page.

import { h } from "../lib.js";

/** buttons(key, {label, onclick, disabled, ...attrs}) → the same <button> for the same key. */
export function buttonCache() {
  const made = new Map();
  return (key, { label, onclick, disabled = false, ...attrs }) => {
    let entry = made.get(key);
    if (!entry) {
      const el = h("button", { type: "button", ...attrs });
      entry = { el, onclick };
      el.addEventListener("click", (e) => entry.onclick(e));
      made.set(key, entry);
    }
    entry.onclick = onclick; // the latest handler sees the latest data
    if (entry.el.textContent !== label) entry.el.textContent = label;
    entry.el.disabled = Boolean(disabled);
    for (const [k, v] of Object.entries(attrs)) {
      if (k === "class") entry.el.className = v;
      else entry.el.setAttribute(k, v);
    }
    return entry.el;
  };
}

/** Runs draw(); then, if the focused element was moved and is still in the page, refocuses it. */
export function keepFocus(draw) {
  const focused = document.activeElement;
  draw();
  if (focused && focused !== document.body && focused !== document.activeElement && focused.isConnected) {
    focused.focus({ preventScroll: true });
  }
}
